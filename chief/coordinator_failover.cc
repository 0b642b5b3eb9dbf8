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
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chief/coordinator.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

absl::Duration Coordinator::FailoverAfter() const {
  const int ms = options_.job.replication().failover_after_ms();
  return absl::Milliseconds(ms > 0 ? ms : 500);
}

absl::Duration Coordinator::PsProbeTimeout() const { return Replicated() ? FailoverAfter() : absl::Seconds(2); }

void Coordinator::InitReplicas() {
  const int n = NumPsTasks();
  primary_of_.assign(n, 0);
  backup_of_.assign(n, -1);
  ps_lost_.assign(n, false);
  store_admins_.clear();
  for (int s = 0; s < n; ++s) {
    primary_of_[s] = s;
    backup_of_[s] = (s + 1) % n;  // as AssignBackups placed them
    store_admins_.push_back(std::make_unique<PsAdmin>(
        channels_->Get(*options_.cluster.AddressOf(MakeTaskId(kPsJob, s))), absl::StrCat("ps:", s)));
  }
  NewEpoch();
}

void Coordinator::NewEpoch() {
  // Above any epoch a chief before this one gave (a PS refuses older ones):
  // one more than the job state's and the PS's (LearnGenerationFloor),
  // recorded before any PS sees it. Never from the clock: a chief
  // restarted with its clock behind would hand out epochs the PS refuse.
  ++epoch_;
  if (floor_learned_) SaveJobState(true);
  for (int s = 0; s < static_cast<int>(store_admins_.size()); ++s) store_admins_[s]->SetReplica(s, epoch_);
  PublishReplicas();
}

void Coordinator::PublishReplicas() {
  absl::MutexLock lock(&mu_);
  status_.clear_replica();
  for (int s = 0; s < static_cast<int>(primary_of_.size()); ++s) {
    JobStatusResponse::Replica* r = status_.add_replica();
    r->set_store(s);
    r->set_primary(absl::StrCat("ps:", primary_of_[s]));
    if (backup_of_[s] >= 0) r->set_backup(absl::StrCat("ps:", backup_of_[s]));
    r->set_epoch(epoch_);
    r->set_state(backup_of_[s] >= 0 ? JobStatusResponse::Replica::REPLICATED
                                    : JobStatusResponse::Replica::UNREPLICATED);
  }
  status_.set_failovers(summary_.failovers);
  status_.set_rebuilds(summary_.rebuilds);
}

ReplicaRoute Coordinator::Route() const {
  ReplicaRoute r;
  if (!Replicated()) return r;
  r.set_epoch(epoch_);
  for (int t : primary_of_) r.add_store_task(t);
  return r;
}

PsAdmin* Coordinator::StoreAdmin(int store) const {
  if (!Replicated() || store >= static_cast<int>(store_admins_.size())) return ps_[store].admin.get();
  return store_admins_[store].get();
}

uint64_t Coordinator::StoreIncarnation(int store) const {
  if (!Replicated() || store >= static_cast<int>(primary_of_.size())) return ps_[store].incarnation;
  return ps_[primary_of_[store]].incarnation;
}

absl::Status Coordinator::ConfigureStore(int store, CreateVariablesRequest req) {
  const int primary = primary_of_[store], backup = backup_of_[store];
  ReplicaConfig* rc = req.mutable_replica();
  rc->set_store(store);
  rc->set_epoch(epoch_);
  // The backup first: the primary forwards to it from its first push.
  if (backup >= 0) {
    rc->set_backup(true);
    ASSIGN_OR_RETURN(CreateVariablesResponse b, ps_[backup].admin->CreateVariables(req));
    ps_[backup].incarnation = b.incarnation();
    rc->set_backup(false);
    rc->set_backup_task(backup);
    rc->set_backup_address(*options_.cluster.AddressOf(MakeTaskId(kPsJob, backup)));
  }
  ASSIGN_OR_RETURN(CreateVariablesResponse p, ps_[primary].admin->CreateVariables(req));
  ps_[primary].incarnation = p.incarnation();
  // Store admins follow the primary.
  store_admins_[store] = std::make_unique<PsAdmin>(
      channels_->Get(*options_.cluster.AddressOf(MakeTaskId(kPsJob, primary))), absl::StrCat("ps:", primary));
  store_admins_[store]->SetReplica(store, epoch_);
  return absl::OkStatus();
}

absl::Status Coordinator::DropBackups(const std::string& why) {
  bool any = false;
  for (int& b : backup_of_) any = any || b >= 0;
  if (!any) return absl::OkStatus();
  for (int& b : backup_of_) b = -1;
  NewEpoch();
  for (int s = 0; s < NumPsTasks(); ++s) RETURN_IF_ERROR(CreateVariablesOn(s));
  report_(absl::StrCat("WARNING: ", why, ": every store runs unreplicated (placement epoch ", epoch_, ")"));
  return absl::OkStatus();
}

absl::Status Coordinator::Failover(int ps, const std::string& why) {
  const absl::Time start = ChiefNow();
  const std::string name = ps_[ps].admin->name();
  std::vector<int> moved;  // stores `ps` served as primary
  for (int s = 0; s < NumPsTasks(); ++s) {
    if (primary_of_[s] != ps) continue;
    moved.push_back(s);
    if (backup_of_[s] < 0 || ps_lost_[backup_of_[s]]) {
      // Both copies gone: back to the checkpoint, as without replicas.
      report_(absl::StrCat("failover impossible: ", name, " is gone (", why, ") and store ", s,
                           " has no other copy; falling back to the last checkpoint"));
      InitReplicas();
      return Recover(absl::StrCat(name, " lost with every copy of store ", s));
    }
  }
  ps_lost_[ps] = true;
  for (int s : moved) {
    primary_of_[s] = backup_of_[s];
    backup_of_[s] = -1;
  }
  std::vector<int> unreplicated;
  for (int s = 0; s < NumPsTasks(); ++s) {
    if (backup_of_[s] == ps) backup_of_[s] = -1;
    if (backup_of_[s] < 0) unreplicated.push_back(s);
  }
  NewEpoch();
  // Every store at the new epoch: promoted primaries, primaries that lost
  // their backup, and the rest (their PS move to the epoch with them).
  for (int s = 0; s < NumPsTasks(); ++s) {
    absl::Status c = CreateVariablesOn(s);
    if (!c.ok()) {
      report_(absl::StrCat("failover of ", name, ": moving store ", s, " to epoch ", epoch_, " failed (", c.message(),
                           "); falling back to the last checkpoint"));
      InitReplicas();
      return Recover(absl::StrCat("failover of ", name, " failed"));
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
  const std::vector<bool> paused = PauseWorkers({ps});
  ResumeWorkers(paused, "the failover");
  NoteUnsettledSteps();
  ++summary_.failovers;
  PublishReplicas();
  CountFailure();
  std::vector<std::string> where;
  for (int s : moved) where.push_back(absl::StrCat("store ", s, " -> ps:", primary_of_[s]));
  report_(absl::StrCat("failover: ", name, " is gone (", why, "); ", absl::StrJoin(where, ", "),
                       " promoted at placement epoch ", epoch_, "; training resumed at step ", MinStep(),
                       " without a restore in ", absl::FormatDuration(ChiefNow() - start),
                       " (rolled_back_steps=0); unreplicated now: store ", absl::StrJoin(unreplicated, ", store "),
                       " (until ", name, " answers again and is rebuilt)"));
  return absl::OkStatus();
}

}  // namespace psrt
