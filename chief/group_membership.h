// GroupMembership: the membership of a collective group (multi_worker_
// mirrored, mirrored, hybrid). A worker that stays away shrinks the group,
// one that comes back grows it again. Like Horovod's elastic mode, and
// unlike TensorFlow's MultiWorkerMirroredStrategy (which stops the job),
// losing a machine costs the steps since the last checkpoint, not the job.
// It changes who is a member and which variables each member's replica
// writes to a checkpoint; the recovery that re-forms the group is the
// coordinator's to run (RecoveryRunner).
#ifndef PSRT_CHIEF_GROUP_MEMBERSHIP_H_
#define PSRT_CHIEF_GROUP_MEMBERSHIP_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chief/chief_cluster.h"
#include "chief/core/watch_core.h"

namespace psrt {

class GroupMembership {
 public:
  GroupMembership(ChiefCluster* cluster, const WatchCore* core) : cluster_(*cluster), core_(*core) {}

  // Which variables each member's replica writes to a checkpoint (1/N of
  // them, greedy by bytes); recomputed when the membership changes.
  absl::Status ShareReplicaVariables();
  // Replica `store` has not answered for `down`: past
  // failure.sync_wait_for_worker_ms, and with more members than
  // failure.min_workers (WatchCore::ShrinkGroupNow), its worker is removed
  // from the group (true).
  bool MaybeShrink(int store, absl::Duration down);
  void Shrink(int store, absl::Duration down);
  // Removed worker i answers again: a member from now on.
  absl::Status Readmit(int i);

 private:
  ChiefCluster& cluster_;
  const WatchCore& core_;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_GROUP_MEMBERSHIP_H_
