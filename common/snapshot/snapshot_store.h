// SnapshotStore: a parameter server's snapshots in its own RocksDB
// (DIR/ps-N), laid out as common/snapshot/SNAPSHOT_FORMAT.md describes.
//
// Write puts every tensor's bytes into one new data file beside the
// database (large sequential writes, O_DIRECT where it works), syncs it and
// the directory, and only then commits the snapshot's index to RocksDB with
// a synced write: a crash before that leaves no index and so no snapshot
// (its file is an orphan, removed at the next Open). Read verifies every
// checksum and returns all or nothing (NOT_FOUND without an index,
// DATA_LOSS naming the file and offset, or the key, otherwise). Snapshots
// of the old format (chunks in RocksDB) still read.
//
// Thread-compatible: one writer thread and the restore path, serialized by
// the server.
#ifndef PSRT_COMMON_SNAPSHOT_SNAPSHOT_STORE_H_
#define PSRT_COMMON_SNAPSHOT_SNAPSHOT_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/snapshot/variable_state.h"

namespace rocksdb {
class DB;
}

namespace psrt {

struct PsSnapshot {
  int64_t step = 0;
  int64_t global_step = 0;
  int64_t sync_step = 0;
  std::vector<int64_t> worker_next_step;
  std::vector<VariableState> variables;
  // A delta on this store's snapshot of base_step (< step): its variables
  // with `delta` hold only the rows touched since. Read resolves the chain
  // and returns a whole snapshot (delta false).
  bool delta = false;
  int64_t base_step = 0;
};

// What a reader knows before it reads: the index is checked against it
// before any tensor is allocated.
struct SnapshotReadOptions {
  // Called for each variable the index names (a delta's too) with its
  // definition and its value's dtype and shape, before anything is
  // allocated; an error refuses the whole read and is returned prefixed
  // with the store and step. Empty: no check beyond the file's own.
  std::function<absl::Status(const VariableDef& def, DataType dtype, const TensorShape& value)> check_variable;
  // The most bytes of tensors one snapshot may need; 0: this machine's
  // physical memory. More is RESOURCE_EXHAUSTED naming both figures.
  int64_t max_bytes = 0;
};

// OK when a piece of a variable as a snapshot holds it (its definition
// `saved` and value dtype and shape) can be a piece of the job's variable
// `job` (its whole shape, any row range): same kind, float32, the same
// row width, no more rows than the variable has (hash tables: any number).
// FAILED_PRECONDITION naming the variable and both shapes otherwise.
absl::Status FitsVariable(const VariableDef& job, const VariableDef& saved, DataType dtype, const TensorShape& value);

struct SnapshotStoreOptions {
  // Tensor bytes go to the data file in writes of at most this much.
  int64_t chunk_bytes = 64 << 20;
  // O_DIRECT for data files where the file system takes it (measured:
  // steadier and faster than buffered writes here; see data_file.h).
  bool direct_io = true;
  // Fault injection for tests: after this many chunks of a Write, call
  // on_fault_pause (which may block forever, waiting for a SIGKILL).
  int64_t fault_pause_after_chunks = 0;
  std::function<void()> on_fault_pause;
};

class SnapshotStore {
 public:
  static absl::StatusOr<std::unique_ptr<SnapshotStore>> Open(const std::string& dir,
                                                             SnapshotStoreOptions options = {});
  // For tools that inspect a store: never creates or changes a file (a
  // write fails).
  static absl::StatusOr<std::unique_ptr<SnapshotStore>> OpenReadOnly(const std::string& dir);
  ~SnapshotStore();

  // Durable on return; the bytes written. After a failed write (a full
  // disk, say) the store must not be written again: RocksDB keeps the error
  // (and Debian's build asserts on the next write to that log), so the
  // owner reopens it (Reopen) before the next snapshot.
  absl::StatusOr<int64_t> Write(const PsSnapshot& snapshot);
  // Closes `store` and opens its directory again: what a failed write
  // left half-done is dropped by RocksDB's recovery, the rest is kept.
  static absl::StatusOr<std::unique_ptr<SnapshotStore>> Reopen(std::unique_ptr<SnapshotStore> store);
  // A delta (incremental checkpoint) is read with its chain of bases and
  // returned whole; a missing, rewritten or corrupt link is DATA_LOSS
  // naming the step of the delta and of the link.
  // Every size, offset and dtype the index names is checked against the
  // file (and `options`) before anything is allocated: a tensor past the
  // file's end, tensors adding up to more than the file (or than the old
  // format's chunks hold), a value or slot that is not float32, ids that are
  // not int64 [rows] are DATA_LOSS naming the store, step and tensor.
  absl::StatusOr<PsSnapshot> Read(int64_t step, const SnapshotReadOptions& options = {}) const;
  // Steps that have an index, ascending. Best effort: where the listing
  // fails part-way (damaged RocksDB files) it logs and returns what it read.
  std::vector<int64_t> Steps() const;
  // The same, or the error when not every index could be listed: for
  // anything that deletes by the list.
  absl::StatusOr<std::vector<int64_t>> ListSteps() const;
  // Deletes all but the newest `keep` snapshots (index first); `protect`
  // (the step just written, if >= 0) is always kept and counts as one, and
  // so is every base a kept delta's chain needs.
  // Their indexes are gone on return; their data files are unlinked by a
  // thread of the store's (an unlink of a large file takes 0.1-0.2 s on a
  // disk mounted with discard), joined by the next Write or Prune and by
  // the destructor. A crash first leaves orphans for the next Open.
  absl::Status Prune(int keep, int64_t protect = -1);
  // Deletes every snapshot but `retain`'s (those present), `protect` and
  // every base their chains need.
  absl::Status PruneTo(const std::vector<int64_t>& retain, int64_t protect);

  // For a store found corrupt (a Read or Write said DATA_LOSS): keeps in
  // memory every snapshot that still reads whole, closes the store, moves
  // its directory aside (DIR.corrupt-<unix ms>, for inspection) and writes
  // the kept snapshots into a fresh store at DIR, which it returns. The
  // damaged files are out of the way, so later snapshots succeed (RocksDB
  // would otherwise trip over them again in every compaction). `report`
  // gets a line naming the steps kept and lost.
  static absl::StatusOr<std::unique_ptr<SnapshotStore>> Salvage(std::unique_ptr<SnapshotStore> corrupt,
                                                                std::string* report);
  const std::string& dir() const { return dir_; }

 private:
  // One snapshot as stored: a delta's variables hold only its rows.
  absl::StatusOr<PsSnapshot> ReadOne(int64_t step, const SnapshotReadOptions& options) const;
  // Deletes every snapshot of `all` (the store's steps) but `retain`,
  // `protect` and the bases their chains need.
  absl::Status PruneKeeping(const std::vector<int64_t>& all, const std::vector<int64_t>& retain, int64_t protect);
  // RESOURCE_EXHAUSTED when the disk lacks room for `snapshot`.
  absl::Status CheckSpace(const PsSnapshot& snapshot) const;

  SnapshotStore(std::string dir, SnapshotStoreOptions options, rocksdb::DB* db, bool read_only)
      : dir_(std::move(dir)), options_(std::move(options)), db_(db), read_only_(read_only) {}

  const std::string dir_;
  const SnapshotStoreOptions options_;
  rocksdb::DB* const db_;  // owned
  const bool read_only_;
  std::thread remover_;  // Prune's unlinks of data files; see Prune
};

}  // namespace psrt

#endif  // PSRT_COMMON_SNAPSHOT_SNAPSHOT_STORE_H_
