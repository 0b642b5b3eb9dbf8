#include "chief/recovery.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

absl::Status RecoveryRunner::Recover(const std::string& why, bool failure) {
  const absl::Time start = ChiefNow();
  cluster_.report(absl::StrCat("recovering: ", why));
  cluster_.EditStatus([&](JobStatusResponse* status) { status->set_state(JobStatusResponse::RECOVERING); });
  if (failure) cluster_.CountFailure();
  // Workers known to be down are not waited on, and the others at once: the
  // generation fence keeps whatever a worker we could not pause still
  // pushes out of the restored parameters.
  cluster_.ForEachWorker([this](int i) {
    WorkerView& w = cluster_.workers[i];
    if (!w.reachable || (w.state != WorkerStatusResponse::RUNNING && w.state != WorkerStatusResponse::PAUSED)) {
      return absl::OkStatus();
    }
    // A healthy worker pauses in milliseconds (its push in flight goes to a
    // dead PS and fails at once); one that does not is left to the fence.
    absl::StatusOr<int64_t> s = w.control->Pause(cluster_.generation, absl::Seconds(2), {}, w.incarnation);
    if (!s.ok()) {
      w.reachable = false;
      return s.status();
    }
    // Its own word on where it got: the record may lag a second of pushes,
    // which the restore takes back too (rolled_back_steps counts them).
    w.step = std::max(w.step, *s);
    return absl::OkStatus();
  });
  std::vector<int64_t> reached(cluster_.NumWorkers());
  for (int i = 0; i < cluster_.NumWorkers(); ++i) reached[i] = cluster_.workers[i].step;
  RETURN_IF_ERROR(RestoreOrStartFresh());
  int64_t rolled_back = 0;
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    rolled_back += std::max<int64_t>(0, reached[i] - cluster_.workers[i].step);
  }
  cluster_.summary.rolled_back_steps += rolled_back;
  cluster_.SaveJobState(true);  // a chief taking over after this one goes on from it
  std::vector<absl::Status> resumed = cluster_.ForEachWorker([this](int i) {
    WorkerView& w = cluster_.workers[i];
    if (w.removed) return absl::OkStatus();  // not in the group it re-forms
    if (!w.reachable) return absl::UnavailableError(absl::StrCat(w.control->name(), " is down"));
    // A worker that had finished redoes the steps since the checkpoint; a
    // mirrored group is formed anew (its old one is broken, and a restarted
    // member listens on another port).
    // One whose streams the restore dealt anew is started with them.
    const bool redealt = std::find(redealt_.begin(), redealt_.end(), i) != redealt_.end();
    if (w.state == WorkerStatusResponse::DONE || cluster_.shape.collective || redealt) {
      return w.control->Start(cluster_.AssignmentFor(i, w.step));
    }
    return w.control->Resume(w.step, cluster_.generation, ReplicaRoute(), cluster_.ResumeEndStep(w.step));
  });
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    WorkerView& w = cluster_.workers[i];
    if (w.removed) {
      // Not in the group: what it says of its steps when it comes back
      // predates the restore (ChangeMembership asks a holder for its step
      // only when its incarnation is known).
      if (!cluster_.shape.collective) w.incarnation = 0;
      continue;
    }
    if (resumed[i].ok()) {
      w.state = WorkerStatusResponse::RUNNING;
      // Started afresh: the incarnation it was started in is the one the
      // watch expects (a member restarted since is started again there).
      if (cluster_.shape.collective) {
        w.incarnation = cluster_.registry->Get(MakeTaskId(kWorkerJob, i)).info.incarnation();
      }
    } else {
      // Down or restarted: the watch loop starts it when it answers.
      LOG(WARNING) << "resume after recovery: " << resumed[i];
      w.incarnation = 0;
    }
  }
  cluster_.EditStatus([&](JobStatusResponse* status) { status->set_state(JobStatusResponse::RUNNING); });
  cluster_.report(absl::StrCat("recovered to the checkpoint of step ", cluster_.last_checkpoint_step, " in ",
                               absl::FormatDuration(ChiefNow() - start), "; failures survived: ",
                               cluster_.summary.failures_survived, "; rolled_back_steps=", rolled_back));
  return absl::OkStatus();
}

absl::Status RecoveryRunner::RestoreOrStartFresh() {
  redealt_.clear();
  for (int attempt = 0;; ++attempt) {
    RETURN_IF_ERROR(WaitForAllPs());
    // A new generation before anything is restored: from the moment a PS
    // takes it, pushes of the old one are refused there.
    cluster_.NewGeneration();
    absl::StatusOr<CheckpointManifest> m = RestoreNewest();
    if (m.ok()) {
      for (int i = 0; i < cluster_.NumWorkers(); ++i) {
        cluster_.workers[i].step = StepAfterRestore(*m, i);
      }
      RestoreStreamsOf(*m);
      cluster_.last_checkpoint_step = m->step();
      cluster_.summary.restored_from_step = m->step();
      cluster_.summary.checkpoints.push_back(m->step());
      cluster_.summary.failures_survived = std::max(cluster_.summary.failures_survived, m->failures_survived());
      cluster_.report(absl::StrCat("restored checkpoint of step ", m->step(), " from ",
                                   cluster_.manifests.PathFor(m->step()), " (generation ", cluster_.generation, ")"));
      return absl::OkStatus();
    }
    if (m.status().code() == absl::StatusCode::kNotFound) return StartFresh();  // nothing to lose
    if (m.status().code() == absl::StatusCode::kFailedPrecondition) {
      if (cluster_.options.job.failure().on_no_checkpoint() == FailurePolicy::START_FRESH) {
        cluster_.report(absl::StrCat("WARNING: ", m.status().message(),
                                     "; starting fresh on every PS (failure.on_no_checkpoint: START_FRESH)"));
        return StartFresh();
      }
      const std::string what =
          absl::StrCat(m.status().message(),
                       "; refusing to train on a mix of restored and fresh parameters "
                       "(failure.on_no_checkpoint: WAIT). Repair the snapshot stores, or restart the chief "
                       "with --restore=never to start fresh");
      cluster_.report(absl::StrCat("WAITING FOR AN OPERATOR: ", what));
      cluster_.EditStatus([&](JobStatusResponse* status) { status->set_waiting_for(what); });
    } else {
      cluster_.report(absl::StrCat("restore failed (try ", attempt + 1, "), trying again: ", m.status().message()));
    }
    absl::SleepFor(cluster_.Backoff(attempt));
  }
}

void RecoveryRunner::RestoreStreamsOf(const CheckpointManifest& m) {
  if (!cluster_.shape.elastic) return;
  std::map<int, std::vector<StreamPos>> saved;
  for (const CheckpointManifest::StreamPosition& p : m.stream()) {
    saved[p.worker()].push_back(StreamPos{p.stream(), p.batch()});
  }
  absl::StatusOr<std::vector<int>> changed = RestoreStreams(cluster_.shape.num_streams, saved, &cluster_.workers);
  if (!changed.ok()) {
    cluster_.report(absl::StrCat("WARNING: the checkpoint of step ", m.step(),
                                 " names data streams no worker can read (", changed.status().message(),
                                 "): keeping the current deal"));
    return;
  }
  redealt_ = *changed;
}

absl::Status RecoveryRunner::StartFresh() {
  for (WorkerView& w : cluster_.workers) w.step = 0;
  // Every stream from its first batch again, dealt among the members.
  RETURN_IF_ERROR(cluster_.DealStreams());
  redealt_ = cluster_.GroupMembers();
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (cluster_.StoreActive(p)) RETURN_IF_ERROR(cluster_.CreateVariablesOn(p, /*reinitialize=*/true));
  }
  cluster_.last_checkpoint_step = -1;
  return absl::OkStatus();
}

absl::Status RecoveryRunner::RestoreAll(const CheckpointManifest& m) {
  std::set<std::string> theirs, ours;
  for (const CheckpointManifest::Shard& shard : m.shard()) theirs.insert(shard.path());
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (cluster_.StoreActive(p)) ours.insert(cluster_.shape.StoreName(p));
  }
  std::vector<std::string> all, replicas;
  for (const CheckpointManifest::Shard& shard : m.shard()) {
    all.push_back(shard.path());
    if (absl::StartsWith(shard.path(), "worker-")) replicas.push_back(shard.path());
  }
  // The same stores holding the same variables (after a PS joined or
  // left they may not): each reads its own snapshot.
  const bool same = theirs == ours && SamePlacement(m);
  if (theirs != ours) {
    cluster_.report(absl::StrCat("checkpoint of step ", m.step(), " was taken with another layout (",
                                 absl::StrJoin(theirs, ", "), "): assembling every store's variables from it"));
  } else if (!same) {
    cluster_.report(absl::StrCat("checkpoint of step ", m.step(),
                                 " was taken with its variables on other PS (a PS "
                                 "joined or left since): assembling every store's variables from it"));
  }
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (!cluster_.StoreActive(p)) continue;
    // Same layout: a PS reads its own snapshot, a replica the replicas'
    // shares (each wrote 1/N). Another layout: every store reads them all.
    std::vector<std::string> sources;
    if (!same) sources = all;
    if (same && cluster_.shape.IsReplica(p)) sources = replicas;
    RETURN_IF_ERROR(
        cluster_.StoreAdmin(p)->Restore(m.step(), cluster_.manifests.dir(), cluster_.generation, sources).status());
  }
  if (cluster_.shape.replicated) return RestoreBackups(m, theirs != ours ? all : std::vector<std::string>{});
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManifest> RecoveryRunner::RestoreNewest() {
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (cluster_.StoreActive(p)) {
      RETURN_IF_ERROR(cluster_.CreateVariablesOn(p, /*reinitialize=*/false, /*restoring=*/true));
    }
  }
  std::vector<int64_t> steps = cluster_.manifests.Steps();
  if (steps.empty()) return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", cluster_.manifests.dir()));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    absl::StatusOr<CheckpointManifest> m = cluster_.manifests.Read(*it);
    if (!m.ok()) {
      cluster_.report(absl::StrCat("refused checkpoint: ", m.status().message()));
      continue;
    }
    absl::Status restored = RestoreAll(*m);
    if (restored.ok()) return m;
    if (restored.code() != absl::StatusCode::kDataLoss && restored.code() != absl::StatusCode::kNotFound) {
      return restored;
    }
    cluster_.report(absl::StrCat("refused checkpoint of step ", m->step(), ": ", restored.message()));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no committed checkpoint in ", cluster_.manifests.dir(), " can be restored on every PS"));
}

absl::Status RecoveryRunner::WaitForAllPs() {
  const int wait_ms = cluster_.options.job.failure().ps_wait_ms();
  const absl::Time start = ChiefNow();
  absl::Time said = start;
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    while (cluster_.StoreActive(p)) {
      absl::StatusOr<PsStatusResponse> st = cluster_.ps[p].admin->Status(absl::Seconds(1));
      if (st.ok()) break;
      // A member's replica that stays away: the group goes on without it.
      if (group_->MaybeShrink(p, ChiefNow() - std::min(start, cluster_.ps[p].down_since))) break;
      std::string what = absl::StrCat(cluster_.ps[p].admin->name(), " (not answering: ", st.status().message(), ")");
      if (wait_ms > 0 && ChiefNow() - start > absl::Milliseconds(wait_ms)) {
        return absl::UnavailableError(absl::StrCat(cluster_.ps[p].admin->name(),
                                                   " did not come back within ps_wait_ms ", wait_ms, ": ",
                                                   st.status().message()));
      }
      if (ChiefNow() - said >= absl::Minutes(1)) {
        said = ChiefNow();
        cluster_.report(absl::StrCat("recovery waits for ", what, " since ",
                                     absl::FormatDuration(absl::Trunc(ChiefNow() - start, absl::Seconds(1)))));
      }
      cluster_.EditStatus([&](JobStatusResponse* status) { status->set_waiting_for(what); });
      cluster_.registry->WaitForChange(cluster_.registry->version(), absl::Milliseconds(50));
    }
  }
  cluster_.EditStatus([&](JobStatusResponse* status) { status->clear_waiting_for(); });
  return absl::OkStatus();
}

bool RecoveryRunner::SamePlacement(const CheckpointManifest& m) const {
  bool recorded = false;
  for (const CheckpointManifest::Shard& shard : m.shard()) recorded |= shard.variable_size() > 0;
  if (!recorded) return true;  // written before the field: the first placement
  for (const CheckpointManifest::Shard& shard : m.shard()) {
    const int p = shard.ps_task();
    if (p < 0 || p >= cluster_.NumPs() || cluster_.shape.IsReplica(p)) continue;
    std::vector<std::string> now, then(shard.variable().begin(), shard.variable().end());
    for (const VariableDef& v : VariablesOnStore(cluster_.plan.placement, p)) now.push_back(v.name());
    std::sort(now.begin(), now.end());
    std::sort(then.begin(), then.end());
    if (now != then) return false;
  }
  return true;
}

absl::Status RecoveryRunner::RestoreBackups(const CheckpointManifest& m, const std::vector<std::string>& sources) {
  cluster_.roles.unsettled_step.clear();  // the new generation refuses every push from before
  std::vector<std::string> restored;
  for (int s = 0; s < cluster_.shape.num_ps_tasks; ++s) {
    const int b = cluster_.roles.backup_of[s];
    if (b < 0 || cluster_.roles.lost[b]) continue;
    // The same data the primary restored: its shard, or every shard of a
    // checkpoint of another layout.
    std::vector<std::string> from = sources;
    for (const CheckpointManifest::Shard& sh : m.shard()) {
      if (sources.empty() && sh.ps_task() == s) from.push_back(sh.path());
    }
    absl::Status r =
        from.empty()
            ? absl::NotFoundError(absl::StrCat("the checkpoint has no shard of store ", s))
            : cluster_.CopyAdmin(b, s)->Restore(m.step(), cluster_.manifests.dir(), cluster_.generation, from).status();
    if (!r.ok()) {
      return DropBackups(absl::StrCat("restoring store ", s, "'s backup on ps:", b, " from the checkpoint of step ",
                                      m.step(), " failed (", r.message(), ")"));
    }
    restored.push_back(absl::StrCat("store ", s, " on ps:", b));
  }
  if (!restored.empty()) {
    cluster_.report(absl::StrCat("backups restored from the checkpoint of step ", m.step(), " too: ",
                                 absl::StrJoin(restored, ", "), " (placement epoch ", cluster_.roles.epoch, ")"));
  }
  return absl::OkStatus();
}

absl::Status RecoveryRunner::DropBackups(const std::string& why) {
  bool any = false;
  for (int& b : cluster_.roles.backup_of) any = any || b >= 0;
  if (!any) return absl::OkStatus();
  for (int& b : cluster_.roles.backup_of) b = -1;
  cluster_.NewEpoch();
  for (int s = 0; s < cluster_.shape.num_ps_tasks; ++s) RETURN_IF_ERROR(cluster_.CreateVariablesOn(s));
  cluster_.report(
      absl::StrCat("WARNING: ", why, ": every store runs unreplicated (placement epoch ", cluster_.roles.epoch, ")"));
  return absl::OkStatus();
}

}  // namespace psrt
