// Rebuilding backups (job.replication.factor 2, issue #15): after a
// failover the stores of the lost PS run unreplicated; when that PS
// answers again (restarted, a replacement at its address, or one that was
// only cut off) the chief makes it hold its two copies again, the layout
// InitReplicas placed: store P's primary (its own core) and store P-1's
// backup. With the workers paused at a step boundary:
//   1. every PS moves to a new placement epoch with the new roles: store P
//      served by ps:P again, forwarding to the copy that served it (now its
//      backup); store P-1 forwarding to a new backup on ps:P. From then on
//      a push of the old epoch (a worker the chief could not pause) is
//      refused, so nothing lands on one copy only;
//   2. the copy that served each of these stores snapshots it (values,
//      optimizer slots, step and update counters, hash-table rows) into
//      the checkpoint volume, as checkpoint "<name>-rebuild";
//   3. ps:P restores its copies from those snapshots (restore_assembly.h);
//   4. workers resume at their steps with the new route.
// Any step failing puts the old roles back at another epoch (ps:P lost
// again, tried again with backoff); if even that fails, the checkpoint.
//
// Why the whole copy inside the pause: it is exact by construction (the
// state is still), and for the MLP it costs about 0.1 s, most of it the
// snapshot's write (tests/replication_soak_test). A dense model changes
// every value each step, so copying ahead would not shorten it; for large
// embedding tables copying the bulk while training goes on and only the
// rows touched since inside the pause (the incremental checkpoints'
// deltas) would, as would a PS-to-PS copy that skips the disk: not built.
// The snapshot to another checkpoint name also makes the primary's next
// incremental checkpoint a full one.
//
// SYNC: the workers must all pause at the same step, or the primary holds
// a step partly summed (not in a snapshot); otherwise it is tried later.
//
// Why every worker must be running (none parked on a failed push), and
// past the step it was at when the last failover ended, before a rebuild
// starts: a restored copy has no record of the request ids applied before,
// so a push its primary applied but could not acknowledge (its forward to
// the lost backup failed), pushed again after the copy, would be applied
// again on the rebuilt copy (seen: a backup one update ahead). A worker
// past that step has pushed it again and been answered.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "chief/failover.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

void FailoverRunner::NoteUnsettledSteps() {
  cluster_.roles.unsettled_step.assign(cluster_.NumWorkers(), -1);
  cluster_.ForEachWorker([&](int i) {
    absl::StatusOr<WorkerStatusResponse> st = cluster_.workers[i].control->Status(absl::Seconds(2));
    // One that does not answer: its step as last known, and it must pass
    // the next one too (it may have gone on meanwhile).
    cluster_.roles.unsettled_step[i] = st.ok() ? st->step() : cluster_.workers[i].step + 1;
    return st.status();
  });
}

absl::StatusOr<bool> FailoverRunner::MaybeRebuild() {
  if (!cluster_.shape.replicated || ChiefNow() < next_rebuild_try_) return false;
  // A lost PS is polled at most this often: one that hangs costs the
  // watch loop the poll's 300 ms each time.
  next_rebuild_try_ = ChiefNow() + absl::Milliseconds(500);
  for (int p = 0; p < cluster_.shape.num_ps_tasks; ++p) {
    if (!cluster_.roles.lost[p] || !cluster_.ps[p].admin->Status(absl::Milliseconds(300)).ok()) continue;
    for (int i = 0; i < cluster_.NumWorkers(); ++i) {
      const WorkerView& w = cluster_.workers[i];
      if (w.removed || w.left || w.state == WorkerStatusResponse::DONE) continue;
      // Not at a clean step boundary yet, or not past the step a failover
      // left unsettled (see the file comment): a later pass.
      if (!w.reachable || w.state != WorkerStatusResponse::RUNNING) return false;
      if (i < static_cast<int>(cluster_.roles.unsettled_step.size()) && w.step <= cluster_.roles.unsettled_step[i]) {
        return false;
      }
    }
    absl::Status s = Rebuild(p);
    if (s.ok()) {
      rebuild_failures_ = 0;
      return true;
    }
    if (s.code() == absl::StatusCode::kAborted) {  // postponed, nothing changed: soon again
      LOG(INFO) << "rebuilding " << cluster_.ps[p].admin->name() << " postponed: " << s.message();
      return true;
    }
    const absl::Duration wait = cluster_.Backoff(rebuild_failures_++);
    next_rebuild_try_ = ChiefNow() + wait;
    cluster_.report(absl::StrCat("WARNING: rebuilding ", cluster_.ps[p].admin->name(), " failed (", s.message(),
                                 "); its stores stay unreplicated, next try in ", absl::FormatDuration(wait)));
    return true;
  }
  return false;
}

absl::Status FailoverRunner::Rebuild(int ps) {
  const int n = cluster_.shape.num_ps_tasks;
  const std::string name = cluster_.ps[ps].admin->name();
  const std::vector<int> old_primary = cluster_.roles.primary_of, old_backup = cluster_.roles.backup_of;
  // The stores ps holds a copy of in the placed layout: its own, and the
  // previous one's backup. Each is copied from the PS serving it now.
  std::vector<int> stores = {ps};
  if (n > 1 && (ps + n - 1) % n != ps) stores.push_back((ps + n - 1) % n);
  for (int s : stores) {
    if (old_primary[s] == ps || cluster_.roles.lost[old_primary[s]]) {
      return absl::FailedPreconditionError(absl::StrCat("store ", s, " has no live copy to rebuild ", name, " from"));
    }
  }
  const absl::Time paused_at = ChiefNow();
  const std::vector<bool> paused = cluster_.PauseWorkers();
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    const WorkerView& w = cluster_.workers[i];
    if (!paused[i] && !w.removed && !w.left && w.state != WorkerStatusResponse::DONE) {
      cluster_.ResumeWorkers(paused, "a postponed rebuild");
      return absl::AbortedError(absl::StrCat(w.control->name(), " did not pause at a step boundary"));
    }
  }
  // SYNC: workers paused at different steps leave a step partly summed on
  // the primary, which a snapshot does not hold; the copy must wait.
  int64_t highest = -1;
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    if (paused[i]) highest = std::max(highest, cluster_.workers[i].step);
  }
  if (cluster_.shape.sync && highest > cluster_.MinStep()) {
    cluster_.ResumeWorkers(paused, "a postponed rebuild");
    return absl::AbortedError(absl::StrCat("SYNC workers paused at steps ", cluster_.MinStep(), " to ", highest,
                                           ": step ", cluster_.MinStep(), " is partly summed"));
  }
  const int64_t step = cluster_.MinStep();
  // Where the pause goes: pausing, roles, snapshots, restores (the
  // slowest store's: they run at once).
  absl::Duration phase[4] = {ChiefNow() - paused_at, absl::ZeroDuration(), absl::ZeroDuration(), absl::ZeroDuration()};
  const absl::Time roles_at = ChiefNow();
  cluster_.roles.lost[ps] = false;
  for (int s : stores) {
    const int home = s, next = (s + 1) % n;
    cluster_.roles.primary_of[s] = cluster_.roles.lost[home] ? next : home;
    const int other = cluster_.roles.primary_of[s] == home ? next : home;
    cluster_.roles.backup_of[s] = cluster_.roles.lost[other] ? -1 : other;
  }
  cluster_.NewEpoch();
  std::string dir(absl::StripSuffix(cluster_.manifests.dir(), "/"));
  dir += "-rebuild";
  int64_t bytes = 0;
  absl::Status copied = [&]() -> absl::Status {
    for (int s = 0; s < n; ++s) RETURN_IF_ERROR(cluster_.CreateVariablesOn(s));
    phase[1] = ChiefNow() - roles_at;
    // The stores at once: each copy has its own snapshot store and writer.
    const size_t k = stores.size();
    std::vector<absl::Status> done(k);
    std::vector<int64_t> sizes(k, 0);
    std::vector<absl::Duration> snapshot_took(k), restore_took(k);
    std::vector<std::thread> copies;
    for (size_t i = 0; i < k; ++i) {
      copies.emplace_back([&, i] {
        const int s = stores[i];
        absl::Time t = ChiefNow();
        // The serving copy's record of data streams goes with its state
        // (RestoreRequest.stream_next_batch): the state is still.
        absl::StatusOr<PsStatusResponse> record = cluster_.CopyAdmin(old_primary[s], s)->Status();
        if (!record.ok()) {
          done[i] = record.status();
          return;
        }
        absl::StatusOr<SnapshotResponse> snap =
            cluster_.CopyAdmin(old_primary[s], s)->Snapshot(step, dir, /*wait_durable=*/true, /*keep=*/1);
        snapshot_took[i] = ChiefNow() - t;
        if (!snap.ok()) {
          done[i] = snap.status();
          return;
        }
        sizes[i] = snap->bytes();
        t = ChiefNow();
        done[i] = cluster_.CopyAdmin(ps, s)
                      ->Restore(step, dir, cluster_.generation, {snap->path()}, &record->stream_next_batch())
                      .status();
        restore_took[i] = ChiefNow() - t;
      });
    }
    for (std::thread& t : copies) t.join();
    for (size_t i = 0; i < k; ++i) {
      bytes += sizes[i];
      phase[2] = std::max(phase[2], snapshot_took[i]);
      phase[3] = std::max(phase[3], restore_took[i]);
      RETURN_IF_ERROR(done[i]);
    }
    return absl::OkStatus();
  }();
  if (!copied.ok()) {
    // The old roles back: the copies that served go on serving.
    cluster_.roles.lost[ps] = true;
    cluster_.roles.primary_of = old_primary;
    cluster_.roles.backup_of = old_backup;
    cluster_.NewEpoch();
    for (int s = 0; s < n; ++s) {
      absl::Status c = cluster_.CreateVariablesOn(s);
      if (!c.ok()) {
        cluster_.report(absl::StrCat("rebuilding ", name, " failed (", copied.message(), ") and putting store ", s,
                                     " back failed too (", c.message(), "); falling back to the last checkpoint"));
        cluster_.InitReplicas();
        return recovery_->Recover(absl::StrCat("a failed rebuild of ", name));
      }
    }
    cluster_.ResumeWorkers(paused, "a failed rebuild");
    return copied;
  }
  cluster_.ResumeWorkers(paused, "the rebuild");
  cluster_.ps[ps].down_since = absl::InfiniteFuture();
  cluster_.PublishReplicas();  // the status page and /metrics: replicated again
  const double pause_ms = absl::ToDoubleMilliseconds(ChiefNow() - paused_at);
  ++cluster_.summary.rebuilds;
  std::vector<std::string> roles, unreplicated;
  for (int s : stores) {
    roles.push_back(
        absl::StrCat("store ", s, " ", cluster_.roles.primary_of[s] == ps ? "primary" : "backup", " on ", name));
  }
  for (int s = 0; s < n; ++s) {
    if (cluster_.roles.backup_of[s] < 0) unreplicated.push_back(absl::StrCat(s));
  }
  cluster_.report(absl::StrCat(
      "rebuilt: ", name, " answers again and holds its copies again (", absl::StrJoin(roles, ", "), "), ", bytes,
      " bytes copied at step ", step, ", placement epoch ", cluster_.roles.epoch, "; training paused ",
      absl::StrFormat("%.1f", pause_ms), " ms (",
      absl::StrFormat("pausing %.1f, roles %.1f, snapshots %.1f, restores %.1f ms",
                      absl::ToDoubleMilliseconds(phase[0]), absl::ToDoubleMilliseconds(phase[1]),
                      absl::ToDoubleMilliseconds(phase[2]), absl::ToDoubleMilliseconds(phase[3])),
      "); ",
      unreplicated.empty() ? std::string("every store is replicated again")
                           : absl::StrCat("unreplicated: store ", absl::StrJoin(unreplicated, ", store "))));
  return absl::OkStatus();
}

}  // namespace psrt
