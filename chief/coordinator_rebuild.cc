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
#include "chief/coordinator.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

std::vector<bool> Coordinator::PauseWorkers(const std::vector<int>& abandon, bool mark_unreachable) {
  std::vector<bool> paused(NumWorkers(), false);
  ForEachWorker([&](int i) {
    WorkerView& w = workers_[i];
    // A membership change (mark_unreachable) asks the unreachable too: one
    // back since the last pass may have pushed past its record, and its
    // word is the only exact one (found by the simulation, seed 350617).
    // Not one a restore could not reach (incarnation 0): its word predates
    // the restore (seed 1142).
    if ((!w.reachable && (!mark_unreachable || w.incarnation == 0)) || w.removed ||
        (w.state != WorkerStatusResponse::RUNNING && w.state != WorkerStatusResponse::PAUSED)) {
      return absl::OkStatus();
    }
    absl::StatusOr<int64_t> s = w.control->Pause(generation_, absl::Seconds(2), abandon, w.incarnation);
    if (s.ok()) {
      w.step = *s;
      w.reachable = true;
      paused[i] = true;
    } else if (mark_unreachable) {
      w.reachable = false;
    }
    return s.status();
  });
  return paused;
}

void Coordinator::ResumeWorkers(const std::vector<bool>& paused, const std::string& after) {
  const ReplicaRoute route = Route();
  ForEachWorker([&](int i) {
    if (!paused[i]) return absl::OkStatus();
    WorkerView& w = workers_[i];
    absl::Status s = w.control->Resume(w.step, generation_, route);
    if (!s.ok()) report_(absl::StrCat("resuming ", w.control->name(), " after ", after, ": ", s.message()));
    return s;
  });
}

void Coordinator::NoteUnsettledSteps() {
  unsettled_step_.assign(NumWorkers(), -1);
  ForEachWorker([&](int i) {
    absl::StatusOr<WorkerStatusResponse> st = workers_[i].control->Status(absl::Seconds(2));
    // One that does not answer: its step as last known, and it must pass
    // the next one too (it may have gone on meanwhile).
    unsettled_step_[i] = st.ok() ? st->step() : workers_[i].step + 1;
    return st.status();
  });
}

namespace {

// A handle on store `store`'s copy on PS task `ps` at placement `epoch`
// (a backup's too: control calls may address one).
std::unique_ptr<PsAdmin> CopyAdmin(ChannelCache* channels, const ClusterSpec& cluster, int ps, int store,
                                   int64_t epoch) {
  auto a = std::make_unique<PsAdmin>(channels->Get(*cluster.AddressOf(MakeTaskId(kPsJob, ps))),
                                     absl::StrCat("ps:", ps));
  a->SetReplica(store, epoch);
  return a;
}

}  // namespace

absl::Status Coordinator::RestoreBackups(const CheckpointManifest& m, const std::vector<std::string>& sources) {
  unsettled_step_.clear();  // the new generation refuses every push from before
  std::vector<std::string> restored;
  for (int s = 0; s < NumPsTasks(); ++s) {
    const int b = backup_of_[s];
    if (b < 0 || ps_lost_[b]) continue;
    // The same data the primary restored: its shard, or every shard of a
    // checkpoint of another layout.
    std::vector<std::string> from = sources;
    for (const CheckpointManifest::Shard& sh : m.shard()) {
      if (sources.empty() && sh.ps_task() == s) from.push_back(sh.path());
    }
    absl::Status r = from.empty() ? absl::NotFoundError(absl::StrCat("the checkpoint has no shard of store ", s))
                                  : CopyAdmin(channels_, options_.cluster, b, s, epoch_)
                                        ->Restore(m.step(), manifests_.dir(), generation_, from)
                                        .status();
    if (!r.ok()) {
      return DropBackups(absl::StrCat("restoring store ", s, "'s backup on ps:", b, " from the checkpoint of step ",
                                      m.step(), " failed (", r.message(), ")"));
    }
    restored.push_back(absl::StrCat("store ", s, " on ps:", b));
  }
  if (!restored.empty()) {
    report_(absl::StrCat("backups restored from the checkpoint of step ", m.step(), " too: ",
                         absl::StrJoin(restored, ", "), " (placement epoch ", epoch_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Coordinator::MaybeRebuild() {
  if (!Replicated() || ChiefNow() < next_rebuild_try_) return false;
  // A lost PS is polled at most this often: one that hangs costs the
  // watch loop the poll's 300 ms each time.
  next_rebuild_try_ = ChiefNow() + absl::Milliseconds(500);
  for (int p = 0; p < NumPsTasks(); ++p) {
    if (!ps_lost_[p] || !ps_[p].admin->Status(absl::Milliseconds(300)).ok()) continue;
    for (int i = 0; i < NumWorkers(); ++i) {
      const WorkerView& w = workers_[i];
      if (w.removed || w.left || w.state == WorkerStatusResponse::DONE) continue;
      // Not at a clean step boundary yet, or not past the step a failover
      // left unsettled (see the file comment): a later pass.
      if (!w.reachable || w.state != WorkerStatusResponse::RUNNING) return false;
      if (i < static_cast<int>(unsettled_step_.size()) && w.step <= unsettled_step_[i]) return false;
    }
    absl::Status s = Rebuild(p);
    if (s.ok()) {
      rebuild_failures_ = 0;
      return true;
    }
    if (s.code() == absl::StatusCode::kAborted) {  // postponed, nothing changed: soon again
      LOG(INFO) << "rebuilding " << ps_[p].admin->name() << " postponed: " << s.message();
      return true;
    }
    const absl::Duration wait = Backoff(rebuild_failures_++);
    next_rebuild_try_ = ChiefNow() + wait;
    report_(absl::StrCat("WARNING: rebuilding ", ps_[p].admin->name(), " failed (", s.message(),
                         "); its stores stay unreplicated, next try in ", absl::FormatDuration(wait)));
    return true;
  }
  return false;
}

absl::Status Coordinator::Rebuild(int ps) {
  const int n = NumPsTasks();
  const std::string name = ps_[ps].admin->name();
  const std::vector<int> old_primary = primary_of_, old_backup = backup_of_;
  // The stores ps holds a copy of in the placed layout: its own, and the
  // previous one's backup. Each is copied from the PS serving it now.
  std::vector<int> stores = {ps};
  if (n > 1 && (ps + n - 1) % n != ps) stores.push_back((ps + n - 1) % n);
  for (int s : stores) {
    if (old_primary[s] == ps || ps_lost_[old_primary[s]]) {
      return absl::FailedPreconditionError(absl::StrCat("store ", s, " has no live copy to rebuild ", name, " from"));
    }
  }
  const absl::Time paused_at = ChiefNow();
  const std::vector<bool> paused = PauseWorkers();
  for (int i = 0; i < NumWorkers(); ++i) {
    const WorkerView& w = workers_[i];
    if (!paused[i] && !w.removed && !w.left && w.state != WorkerStatusResponse::DONE) {
      ResumeWorkers(paused, "a postponed rebuild");
      return absl::AbortedError(absl::StrCat(w.control->name(), " did not pause at a step boundary"));
    }
  }
  // SYNC: workers paused at different steps leave a step partly summed on
  // the primary, which a snapshot does not hold; the copy must wait.
  int64_t highest = -1;
  for (int i = 0; i < NumWorkers(); ++i) {
    if (paused[i]) highest = std::max(highest, workers_[i].step);
  }
  if (Sync() && highest > MinStep()) {
    ResumeWorkers(paused, "a postponed rebuild");
    return absl::AbortedError(absl::StrCat("SYNC workers paused at steps ", MinStep(), " to ", highest,
                                               ": step ", MinStep(), " is partly summed"));
  }
  const int64_t step = MinStep();
  // Where the pause goes: pausing, roles, snapshots, restores (the
  // slowest store's: they run at once).
  absl::Duration phase[4] = {ChiefNow() - paused_at, absl::ZeroDuration(), absl::ZeroDuration(),
                             absl::ZeroDuration()};
  const absl::Time roles_at = ChiefNow();
  ps_lost_[ps] = false;
  for (int s : stores) {
    const int home = s, next = (s + 1) % n;
    primary_of_[s] = ps_lost_[home] ? next : home;
    const int other = primary_of_[s] == home ? next : home;
    backup_of_[s] = ps_lost_[other] ? -1 : other;
  }
  NewEpoch();
  std::string dir(absl::StripSuffix(manifests_.dir(), "/"));
  dir += "-rebuild";
  int64_t bytes = 0;
  absl::Status copied = [&]() -> absl::Status {
    for (int s = 0; s < n; ++s) RETURN_IF_ERROR(CreateVariablesOn(s));
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
        absl::StatusOr<SnapshotResponse> snap = CopyAdmin(channels_, options_.cluster, old_primary[s], s, epoch_)
                                                    ->Snapshot(step, dir, /*wait_durable=*/true, /*keep=*/1);
        snapshot_took[i] = ChiefNow() - t;
        if (!snap.ok()) {
          done[i] = snap.status();
          return;
        }
        sizes[i] = snap->bytes();
        t = ChiefNow();
        done[i] = CopyAdmin(channels_, options_.cluster, ps, s, epoch_)
                      ->Restore(step, dir, generation_, {snap->path()})
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
    ps_lost_[ps] = true;
    primary_of_ = old_primary;
    backup_of_ = old_backup;
    NewEpoch();
    for (int s = 0; s < n; ++s) {
      absl::Status c = CreateVariablesOn(s);
      if (!c.ok()) {
        report_(absl::StrCat("rebuilding ", name, " failed (", copied.message(), ") and putting store ", s,
                             " back failed too (", c.message(), "); falling back to the last checkpoint"));
        InitReplicas();
        return Recover(absl::StrCat("a failed rebuild of ", name));
      }
    }
    ResumeWorkers(paused, "a failed rebuild");
    return copied;
  }
  ResumeWorkers(paused, "the rebuild");
  ps_[ps].down_since = absl::InfiniteFuture();
  PublishReplicas();  // the status page and /metrics: replicated again
  const double pause_ms = absl::ToDoubleMilliseconds(ChiefNow() - paused_at);
  ++summary_.rebuilds;
  std::vector<std::string> roles, unreplicated;
  for (int s : stores) {
    roles.push_back(absl::StrCat("store ", s, " ", primary_of_[s] == ps ? "primary" : "backup", " on ", name));
  }
  for (int s = 0; s < n; ++s) {
    if (backup_of_[s] < 0) unreplicated.push_back(absl::StrCat(s));
  }
  report_(absl::StrCat("rebuilt: ", name, " answers again and holds its copies again (", absl::StrJoin(roles, ", "),
                       "), ", bytes, " bytes copied at step ", step, ", placement epoch ", epoch_,
                       "; training paused ", absl::StrFormat("%.1f", pause_ms), " ms (",
                       absl::StrFormat("pausing %.1f, roles %.1f, snapshots %.1f, restores %.1f ms",
                                       absl::ToDoubleMilliseconds(phase[0]), absl::ToDoubleMilliseconds(phase[1]),
                                       absl::ToDoubleMilliseconds(phase[2]), absl::ToDoubleMilliseconds(phase[3])),
                       "); ",
                       unreplicated.empty() ? std::string("every store is replicated again")
                                            : absl::StrCat("unreplicated: store ", absl::StrJoin(unreplicated, ", store "))));
  return absl::OkStatus();
}

}  // namespace psrt
