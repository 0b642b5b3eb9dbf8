// The commit point of the two-phase checkpoint protocol.
//
// Phase one: every PS snapshots step S into its own store and reports it
// durable. Phase two: the chief writes DIR/checkpoint-S.manifest here. A
// manifest is a serialized CheckpointManifest followed by its CRC32C; it is
// written to a temporary name, fsynced, renamed into place and the directory
// fsynced, so a crash leaves either no manifest or a whole one. A snapshot
// without a manifest is never restored, whatever the PS has on disk.
//
// ManifestStore is thread-compatible: one chief writes a directory.
#ifndef PSRT_COMMON_CHECKPOINT_CHECKPOINT_MANIFEST_H_
#define PSRT_COMMON_CHECKPOINT_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/chief_service.pb.h"

namespace psrt {

// A manifest, or the job state, is at most this large (a manifest lists
// stores and variables: kilobytes); a larger file is DATA_LOSS, not read.
inline constexpr int64_t kMaxManifestBytes = 64 << 20;

// OK when `name` (a manifest's shard path) names a store inside the
// checkpoint directory: one component of [A-Za-z0-9._-], not "." or "..".
// INVALID_ARGUMENT quoting it otherwise (an absolute path, "../../x").
absl::Status CheckStoreName(absl::string_view name);

class ManifestStore {
 public:
  explicit ManifestStore(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string PathFor(int64_t step) const;

  // Writes the manifest atomically; creates the directory if needed.
  absl::Status Commit(const CheckpointManifest& manifest);

  // Reads and verifies one manifest: NOT_FOUND if there is none for that
  // step, DATA_LOSS (naming the file) if it is truncated or corrupt, larger
  // than kMaxManifestBytes, or names a shard path outside the directory
  // (CheckStoreName): no reader opens a store a manifest points elsewhere.
  absl::StatusOr<CheckpointManifest> Read(int64_t step) const;

  // Steps that have a manifest file, ascending (not verified).
  std::vector<int64_t> Steps() const;

  // The newest manifest that verifies; corrupt ones are skipped with a
  // warning naming them (into *skipped if given). NOT_FOUND if none.
  absl::StatusOr<CheckpointManifest> LatestValid(std::vector<std::string>* skipped = nullptr) const;

  // The checkpoints retention keeps, ascending: the newest `keep`; and
  // where any of those has an incremental (delta) shard, also the full
  // checkpoint every kept chain goes back to (B: the oldest all-full one
  // kept, or the newest before them) and A, the newest all-full checkpoint
  // before B. A and B each read only their own step's files, so one
  // corrupt file (say B's, which the newest deltas chain through) leaves
  // one of them whole to restore.
  std::vector<int64_t> Retained(int keep) const;
  // Deletes every manifest Retained(keep) does not name; returns the steps
  // removed.
  std::vector<int64_t> Prune(int keep);

  // DIR/job_state, written atomically like a manifest. A missing file reads
  // as the empty state; a corrupt one as DATA_LOSS.
  absl::StatusOr<ChiefJobState> ReadJobState() const;
  absl::Status WriteJobState(const ChiefJobState& state);

 private:
  absl::Status WriteChecked(const std::string& path, const google::protobuf::Message& m);
  static absl::Status ReadChecked(const std::string& path, absl::string_view kind,
                                  google::protobuf::Message* m);

  const std::string dir_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_CHECKPOINT_CHECKPOINT_MANIFEST_H_
