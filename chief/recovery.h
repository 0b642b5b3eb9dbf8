// RecoveryRunner: back to a committed checkpoint. A PS that came back with
// a new incarnation means its state is gone: workers pause, the chief
// moves every store to a new generation and restores the newest committed
// checkpoint every store can restore whole, and workers resume from its
// steps under that generation (a PS refuses pushes and pulls of any
// other, so a worker the chief could not reach cannot write into the
// restored values). A checkpoint taken with another layout (strategy, PS
// or worker count, placement) is assembled by every store from the
// checkpoint's shards. A failed recovery is retried with backoff.
#ifndef PSRT_CHIEF_RECOVERY_H_
#define PSRT_CHIEF_RECOVERY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chief/chief_cluster.h"
#include "chief/group_membership.h"
#include "common/checkpoint/checkpoint_manifest.h"

namespace psrt {

class RecoveryRunner {
 public:
  // `group` shrinks a collective group whose replica stays away while the
  // recovery waits for every store.
  RecoveryRunner(ChiefCluster* cluster, GroupMembership* group) : cluster_(*cluster), group_(group) {}

  // Back to the last checkpoint, every store restored and every worker
  // started again; `failure`: counted as a failure survived (a member
  // rejoining a collective group is not one).
  absl::Status Recover(const std::string& why, bool failure = true);
  // RestoreNewest() until it succeeds or the job starts fresh (no
  // checkpoint, or none restorable and the policy says START_FRESH);
  // waits for the PS and backs off between tries. Sets the workers' steps.
  absl::Status RestoreOrStartFresh();
  // Every PS back to its initial values at once, workers at step 0.
  absl::Status StartFresh();
  // Restores checkpoint `m` on every store: each PS its own snapshot when
  // `m` was taken with this layout, else (and always for mirrored replicas,
  // which write only their share) every store assembles its variables from
  // the checkpoint's stores the manifest names: another strategy, or
  // another number of PS or workers.
  absl::Status RestoreAll(const CheckpointManifest& m);
  // The step worker i resumes from after restoring `m`: its own in ASYNC
  // (workers run apart), the checkpoint's in a synchronous group (which may
  // not be the group that wrote it).
  int64_t StepAfterRestore(const CheckpointManifest& m, int i) const {
    return !cluster_.shape.sync && i < m.worker_step_size() ? m.worker_step(i) : m.step();
  }
  // The data streams where checkpoint `m` saw them, dealt among the members
  // (RestoreStreams); the workers whose streams changed are started, not
  // resumed, by Recover.
  void RestoreStreamsOf(const CheckpointManifest& m);

 private:
  // Creates the variables on every PS and restores the newest committed
  // checkpoint that every PS can restore whole, refusing (and reporting)
  // corrupt or missing ones and falling back to older ones. NOT_FOUND when
  // there is no manifest at all, FAILED_PRECONDITION when none restores.
  absl::StatusOr<CheckpointManifest> RestoreNewest();
  absl::Status WaitForAllPs();
  // Whether checkpoint `m`'s stores held the variables the placement puts
  // on them now (the restore can read each store's own snapshot).
  bool SamePlacement(const CheckpointManifest& m) const;
  // Replicated: every backup restored from the primary's data in
  // checkpoint `m` (`sources` when it was taken with another layout); on
  // failure the backups are dropped (DropBackups).
  absl::Status RestoreBackups(const CheckpointManifest& m, const std::vector<std::string>& sources);
  // Every store runs unreplicated from now on (`why` is logged).
  absl::Status DropBackups(const std::string& why);

  ChiefCluster& cluster_;
  GroupMembership* const group_;
  // Workers the last restore gave other data streams: started with them,
  // not resumed (Recover).
  std::vector<int> redealt_;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_RECOVERY_H_
