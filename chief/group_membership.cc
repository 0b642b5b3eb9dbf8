// GroupMembership (group_membership.h): the membership of a collective group (multi_worker_mirrored, mirrored,
// hybrid): a worker that stays away shrinks the group, one that comes back
// grows it again. Like Horovod's elastic mode, and unlike TensorFlow's
// MultiWorkerMirroredStrategy (which stops the job), losing a machine costs
// the steps since the last checkpoint, not the job.
#include "chief/group_membership.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

absl::Status GroupMembership::ShareReplicaVariables() {
  cluster_.replica_share.assign(cluster_.NumWorkers(), {});
  if (!cluster_.shape.collective) return absl::OkStatus();
  std::vector<VariableDef> defs;
  for (const VariablePlacement& vp : cluster_.plan.placement.variable()) {
    if (vp.shard(0).ps_task() == cluster_.shape.num_ps_tasks) defs.push_back(vp.variable());
  }
  const std::vector<int> members = cluster_.GroupMembers();
  if (members.empty() || defs.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(PlacementMap shares,
                   PlaceVariables(defs, static_cast<int>(members.size()), /*partition_threshold_bytes=*/INT64_MAX));
  for (const VariablePlacement& vp : shares.variable()) {
    cluster_.replica_share[members[vp.shard(0).ps_task()]].push_back(vp.variable().name());
  }
  return absl::OkStatus();
}

bool GroupMembership::MaybeShrink(int store, absl::Duration down) {
  if (!cluster_.StoreActive(store) ||
      !core_.ShrinkGroupNow(store, static_cast<int>(cluster_.GroupMembers().size()), down))
    return false;
  Shrink(store, down);
  return true;
}

void GroupMembership::Shrink(int store, absl::Duration down) {
  const int members = static_cast<int>(cluster_.GroupMembers().size());
  const int i = store - cluster_.shape.num_ps_tasks;
  cluster_.workers[i].removed = true;
  cluster_.workers[i].reachable = false;
  absl::Status shared = ShareReplicaVariables();
  if (!shared.ok()) cluster_.report(absl::StrCat("sharing the checkpoint among the members: ", shared.message()));
  std::vector<std::string> names;
  for (int m : cluster_.GroupMembers()) names.push_back(cluster_.workers[m].control->name());
  cluster_.report(absl::StrCat(cluster_.workers[i].control->name(), " did not answer for ",
                               absl::FormatDuration(absl::Trunc(down, absl::Seconds(1))),
                               " (failure.sync_wait_for_worker_ms): the collective group shrinks to ", members - 1,
                               " (", absl::StrJoin(names, ", "), ") and goes on from the last checkpoint"));
}

absl::Status GroupMembership::Readmit(int i) {
  cluster_.workers[i].removed = false;
  cluster_.workers[i].reachable = true;
  cluster_.workers[i].down_since = absl::InfiniteFuture();
  return ShareReplicaVariables();
}

}  // namespace psrt
