// The coordinator's side of replicated shards (job.replication.factor 2,
// issue #15): roles and epochs on the PS, failover without a restore.
//
// Invariant: a store is served by exactly one primary at an epoch, and a
// push is acknowledged only once the primary and (when it has one) its
// backup both applied it (common/store/replica_router.h). So when a
// primary's PS is gone its backup holds every acknowledged push: promoting
// it at a new epoch loses nothing, and the epoch fences off the old
// primary should it come back (it can acknowledge nothing: its backup is a
// primary now and refuses its forwards, and workers route by the new
// epoch).
#include "chief/failover.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

absl::Status FailoverRunner::Failover(int ps, const std::string& why) {
  const absl::Time start = ChiefNow();
  const std::string name = cluster_.ps[ps].admin->name();
  std::vector<int> moved;  // stores `ps` served as primary
  for (int s = 0; s < cluster_.shape.num_ps_tasks; ++s) {
    if (cluster_.roles.primary_of[s] != ps) continue;
    moved.push_back(s);
    if (cluster_.roles.backup_of[s] < 0 || cluster_.roles.lost[cluster_.roles.backup_of[s]]) {
      // Both copies gone: back to the checkpoint, as without replicas.
      cluster_.report(absl::StrCat("failover impossible: ", name, " is gone (", why, ") and store ", s,
                                   " has no other copy; falling back to the last checkpoint"));
      cluster_.InitReplicas();
      return recovery_->Recover(absl::StrCat(name, " lost with every copy of store ", s));
    }
  }
  cluster_.roles.lost[ps] = true;
  for (int s : moved) {
    cluster_.roles.primary_of[s] = cluster_.roles.backup_of[s];
    cluster_.roles.backup_of[s] = -1;
  }
  std::vector<int> unreplicated;
  for (int s = 0; s < cluster_.shape.num_ps_tasks; ++s) {
    if (cluster_.roles.backup_of[s] == ps) cluster_.roles.backup_of[s] = -1;
    if (cluster_.roles.backup_of[s] < 0) unreplicated.push_back(s);
  }
  cluster_.NewEpoch();
  // Every store at the new epoch: promoted primaries, primaries that lost
  // their backup, and the rest (their PS move to the epoch with them).
  for (int s = 0; s < cluster_.shape.num_ps_tasks; ++s) {
    absl::Status c = cluster_.CreateVariablesOn(s);
    if (!c.ok()) {
      cluster_.report(absl::StrCat("failover of ", name, ": moving store ", s, " to epoch ", cluster_.roles.epoch,
                                   " failed (", c.message(), "); falling back to the last checkpoint"));
      cluster_.InitReplicas();
      return recovery_->Recover(absl::StrCat("failover of ", name, " failed"));
    }
  }
  // Then workers stop at a step boundary, so that each resumes exactly
  // where it stopped. Nothing holds the pause up: the new epoch ended the
  // forwards to `ps` (a push so ended is not acknowledged) and fences off
  // every push in flight at the old one, and each worker cancels its calls
  // to `ps` itself (a stopped PS would keep them to their deadline). A push
  // cut short runs again under its request id: applied once wherever it
  // had reached. One that cannot pause parks on its own failure and the
  // watch loop resumes it re-routed.
  const std::vector<bool> paused = cluster_.PauseWorkers({ps});
  cluster_.ResumeWorkers(paused, "the failover");
  NoteUnsettledSteps();
  ++cluster_.summary.failovers;
  cluster_.PublishReplicas();
  cluster_.CountFailure();
  std::vector<std::string> where;
  for (int s : moved) where.push_back(absl::StrCat("store ", s, " -> ps:", cluster_.roles.primary_of[s]));
  cluster_.report(absl::StrCat(
      "failover: ", name, " is gone (", why, "); ", absl::StrJoin(where, ", "), " promoted at placement epoch ",
      cluster_.roles.epoch, "; training resumed at step ", cluster_.MinStep(), " without a restore in ",
      absl::FormatDuration(ChiefNow() - start), " (rolled_back_steps=0); unreplicated now: store ",
      absl::StrJoin(unreplicated, ", store "), " (until ", name, " answers again and is rebuilt)"));
  return absl::OkStatus();
}

}  // namespace psrt
