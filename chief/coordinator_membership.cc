// The membership of a collective group (multi_worker_mirrored, mirrored,
// hybrid): a worker that stays away shrinks the group, one that comes back
// grows it again. Like Horovod's elastic mode, and unlike TensorFlow's
// MultiWorkerMirroredStrategy (which stops the job), losing a machine costs
// the steps since the last checkpoint, not the job.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chief/coordinator.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"

namespace psrt {

absl::Status Coordinator::ShareReplicaVariables() {
  replica_share_.assign(NumWorkers(), {});
  if (!Collective()) return absl::OkStatus();
  std::vector<VariableDef> defs;
  for (const VariablePlacement& vp : plan_.placement.variable()) {
    if (vp.shard(0).ps_task() == NumPsTasks()) defs.push_back(vp.variable());
  }
  const std::vector<int> members = GroupMembers();
  if (members.empty() || defs.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(PlacementMap shares,
                   PlaceVariables(defs, static_cast<int>(members.size()), /*partition_threshold_bytes=*/INT64_MAX));
  for (const VariablePlacement& vp : shares.variable()) {
    replica_share_[members[vp.shard(0).ps_task()]].push_back(vp.variable().name());
  }
  return absl::OkStatus();
}

bool Coordinator::MaybeShrinkGroup(int store, absl::Duration down) {
  if (!StoreActive(store) || !core_.ShrinkGroupNow(store, static_cast<int>(GroupMembers().size()), down)) return false;
  ShrinkGroup(store, down);
  return true;
}

void Coordinator::ShrinkGroup(int store, absl::Duration down) {
  const int members = static_cast<int>(GroupMembers().size());
  const int i = store - NumPsTasks();
  workers_[i].removed = true;
  workers_[i].reachable = false;
  absl::Status shared = ShareReplicaVariables();
  if (!shared.ok()) report_(absl::StrCat("sharing the checkpoint among the members: ", shared.message()));
  std::vector<std::string> names;
  for (int m : GroupMembers()) names.push_back(workers_[m].control->name());
  report_(absl::StrCat(workers_[i].control->name(), " did not answer for ",
                       absl::FormatDuration(absl::Trunc(down, absl::Seconds(1))),
                       " (failure.sync_wait_for_worker_ms): the collective group shrinks to ", members - 1,
                       " (", absl::StrJoin(names, ", "), ") and goes on from the last checkpoint"));
}

absl::Status Coordinator::RejoinGroup(int i) {
  // The members' progress first: the group re-forms from this checkpoint
  // (if it fails, from the one before).
  absl::Status c = Checkpoint();
  if (!c.ok()) report_(absl::StrCat("checkpoint before growing the group failed: ", c.message()));
  workers_[i].removed = false;
  workers_[i].reachable = true;
  workers_[i].down_since = absl::InfiniteFuture();
  RETURN_IF_ERROR(ShareReplicaVariables());
  return Recover(absl::StrCat(workers_[i].control->name(), " is back: the collective group grows to ",
                              GroupMembers().size()),
                 /*failure=*/false);
}

}  // namespace psrt
