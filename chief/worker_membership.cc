// Elastic workers under the parameter-server strategy: a worker that was
// not in the spec joins a running job, one that leaves for good has its
// data taken over.
//
// The invariant: each data stream (common/input/streams.h) is read in
// order by one worker at a time, and a membership change moves streams
// only at a step boundary, where the chief knows exactly which batch of
// each stream comes next. So within an epoch no example is skipped or
// read twice because a worker came or went:
//   - ASYNC: every member stops after the step it is in (Pause returns the
//     first step not pushed); each stream goes on from that member's step.
//   - SYNC: every member goes back to the group's step T (the oldest step
//     not applied; the PS drops a step half gathered when the generation
//     changes), so every stream goes on from where step T reads it.
//   - A leaver that said so stopped at a step it reported; one that died
//     is counted at the step it last reported (ASYNC: the steps it pushed
//     since may be read again; SYNC: exact unless it died in the instant
//     its last push completed a step).
#include "chief/worker_membership.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

absl::StatusOr<bool> WorkerMembership::Watch() {
  std::vector<int> joining;
  std::vector<std::string> why;
  // New workers: a view each, in index order (the registry admits them so).
  for (int n = cluster_.registry->NumWorkers(); cluster_.NumWorkers() < n;) {
    const TaskId t = MakeTaskId(kWorkerJob, cluster_.NumWorkers());
    WorkerView v;
    v.name = TaskName(t);
    v.control =
        std::make_unique<WorkerControl>(cluster_.channels->Get(cluster_.registry->Get(t).info.address()), v.name);
    v.removed = true;  // a member from ChangeMembership on
    v.reachable = true;
    v.down_since = absl::InfiniteFuture();
    cluster_.workers.push_back(std::move(v));
    joining.push_back(cluster_.NumWorkers() - 1);
    why.push_back(TaskName(t) + " joins");
  }
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    WorkerView& w = cluster_.workers[i];
    const TaskState t = cluster_.registry->Get(MakeTaskId(kWorkerJob, i));
    if (t.left && !w.left && w.incarnation != 0 && t.info.incarnation() == w.incarnation && !StillServing(&w)) {
      // Its own word: stopped before step left_at_step. Not before what it
      // reported, nor past the end.
      w.step = std::clamp(t.left_at_step, std::min(w.step, cluster_.end_step), cluster_.end_step);
      w.left = w.removed = true;
      w.reachable = false;
      why.push_back(absl::StrCat(w.control->name(), " leaves at step ", w.step));
      const int members = static_cast<int>(cluster_.GroupMembers().size());
      if (members < cluster_.options.job.failure().min_workers()) {
        cluster_.report(absl::StrCat("warning: ", members, " workers left, fewer than job.failure.min_workers=",
                                     cluster_.options.job.failure().min_workers()));
      }
    } else if (w.left && !t.left && t.info.incarnation() != 0 && t.info.incarnation() != w.incarnation) {
      w.reachable = true;
      joining.push_back(i);
      why.push_back(w.control->name() + " comes back");
    }
  }
  if (why.empty()) return false;
  RETURN_IF_ERROR(Change(absl::StrJoin(why, ", "), joining));
  return true;
}

bool WorkerMembership::StillServing(WorkerView* w) {
  // A worker that leaves stops its server before it says so (worker_main),
  // so one that still answers as the same process has not left: the claim
  // came from elsewhere (any holder of a worker token can send it), and
  // taking it would deal the worker's data away while it trains on.
  absl::StatusOr<WorkerStatusResponse> st = w->control->Status(absl::Seconds(2));
  if (!st.ok() || st->incarnation() != w->incarnation) return false;
  if (w->leave_disbelieved != w->incarnation) {
    w->leave_disbelieved = w->incarnation;
    cluster_.report(absl::StrCat("warning: a heartbeat said ", w->control->name(),
                                 " leaves, but it still answers as the same process: not taken out"));
  }
  return true;
}

void WorkerMembership::WarmUpJoiners(const std::vector<int>& joining) {
  // The deal as it would be now: which streams each joiner gets, and about
  // where (the others only move on, so a little behind).
  std::map<int, std::vector<StreamPos>> held, dealt;
  int64_t now = cluster_.end_step;
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    const WorkerView& w = cluster_.workers[i];
    if (w.streams.empty()) continue;
    held[i] = PositionsAt(w.streams, w.stream_base, w.step);
    now = std::min(now, w.step);
  }
  std::vector<int> members = cluster_.GroupMembers();
  members.insert(members.end(), joining.begin(), joining.end());
  if (!Deal(cluster_.shape.num_streams, members, held, &dealt).ok()) return;
  cluster_.ForEachWorker([&](int i) {
    if (std::find(joining.begin(), joining.end(), i) == joining.end() || dealt[i].empty()) return absl::OkStatus();
    WorkerView& w = cluster_.workers[i];
    // A worker coming back holds the streams it left with (when no one was
    // left to take them): they stay its own until the change deals them.
    std::vector<StreamPos> held_before = std::move(w.streams);
    const int64_t base_before = w.stream_base;
    w.streams = dealt[i];
    w.stream_base = now;
    WorkerAssignment a = cluster_.AssignmentFor(i, now);
    a.set_end_step(now);  // builds its input, runs nothing
    w.streams = std::move(held_before);
    w.stream_base = base_before;
    return w.control->Start(a);
  });
}

int64_t WorkerMembership::SyncGroupStep(const std::vector<bool>& paused) {
  // The PS say which step they gather: the oldest not applied. One ahead
  // of another (a lost worker's push reached it and not the other) answers
  // the group's push of its applied step as a duplicate, so the lowest is
  // where every stream stands.
  int64_t step = cluster_.end_step;
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (!cluster_.StoreActive(p) || cluster_.LostToFailover(p)) continue;
    absl::StatusOr<PsStatusResponse> st = cluster_.StoreAdmin(p)->Status(cluster_.shape.ps_probe_timeout);
    if (!st.ok() || st->incarnation() != cluster_.StoreIncarnation(p)) {
      return GroupStep(cluster_.workers, paused, cluster_.end_step);
    }
    step = std::min(step, st->sync_step());
  }
  return step;
}

absl::Status WorkerMembership::Change(const std::string& why, const std::vector<int>& joining) {
  // A worker coming back with the streams it left with (no member was left
  // to take them) may have pushed past its record: stopped, not dead, it
  // went on under the generation nobody fenced. Its own word on its step
  // counts, or its batches since would be read again (found by the
  // simulation, chief/core/cluster_sim.h).
  cluster_.ForEachWorker([&](int i) {
    WorkerView& w = cluster_.workers[i];
    if (std::find(joining.begin(), joining.end(), i) == joining.end() || w.streams.empty() || w.incarnation == 0 ||
        cluster_.registry->Get(MakeTaskId(kWorkerJob, i)).info.incarnation() != w.incarnation) {
      return absl::OkStatus();
    }
    absl::StatusOr<int64_t> s = w.control->Pause(cluster_.generation, absl::Seconds(2), {}, w.incarnation);
    if (s.ok()) w.step = std::clamp(*s, w.step, cluster_.end_step);
    return s.status();
  });
  // A joiner decodes its data before anyone stops: that takes seconds, the
  // change itself milliseconds.
  WarmUpJoiners(joining);
  const absl::Time start = ChiefNow();
  // 1. Every member stops at a step boundary and says which.
  const std::vector<bool> paused = cluster_.PauseWorkers({}, /*mark_unreachable=*/true);
  // 2. Where each stream stands: at each holder's step (ASYNC), or at the
  // group's step T, the oldest not applied (SYNC).
  if (!cluster_.shape.sync) {
    // ASYNC: a holder that did not answer the pause (killed, cut off) may
    // have pushed past its record; its streams go on after the last batch
    // every PS applied (a step some took and others not is pushed again by
    // the next holder, a duplicate where it landed).
    std::string why;
    const std::optional<std::map<int, int64_t>> floors =
        StreamFloors(cluster_.StoreStatuses(), cluster_.StoresView(), &why);
    for (int i = 0; i < cluster_.NumWorkers() && floors.has_value(); ++i) {
      WorkerView& w = cluster_.workers[i];
      if (w.streams.empty() || paused[i]) continue;
      const int64_t step = FirstStepNotApplied(w, w.step, *floors, cluster_.end_step);
      if (step != w.step) {
        cluster_.report(absl::StrCat(w.control->name(), " pushed up to step ", step, ", past its record ", w.step,
                                     ": its streams go on from there"));
        w.step = step;
      }
    }
  }
  const int64_t group_step =
      cluster_.shape.sync ? SyncGroupStep(paused) : GroupStep(cluster_.workers, paused, cluster_.end_step);
  int64_t old_min = cluster_.end_step;
  for (const WorkerView& w : cluster_.workers) {
    if (!w.streams.empty() && !w.removed) old_min = std::min(old_min, w.step);
  }
  if (old_min == cluster_.end_step) old_min = group_step;  // no member before: where the leavers stopped
  std::map<int, std::vector<StreamPos>> held;
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    WorkerView& w = cluster_.workers[i];
    if (w.streams.empty()) continue;
    held[i] = PositionsAt(w.streams, w.stream_base, cluster_.shape.sync ? group_step : w.step);
  }
  for (int i : joining) {
    cluster_.workers[i].removed = cluster_.workers[i].left = false;
    cluster_.workers[i].step = cluster_.shape.sync ? group_step : old_min;
  }
  const std::vector<int> members = cluster_.GroupMembers();
  if (members.empty()) {
    cluster_.report(absl::StrCat("membership: ", why, "; no worker left: training waits for one to join"));
    return absl::OkStatus();  // the leavers keep their streams until then
  }
  std::map<int, std::vector<StreamPos>> dealt;
  RETURN_IF_ERROR(Deal(cluster_.shape.num_streams, members, held, &dealt));
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    WorkerView& w = cluster_.workers[i];
    if (w.removed) {
      w.streams.clear();  // dealt to the members
      continue;
    }
    if (cluster_.shape.sync) w.step = group_step;
    w.streams = dealt[i];
    w.stream_base = w.step;
  }
  // 3. The new group: its size on every PS (a SYNC step waits for that many
  // pushes), under a new generation that fences off anything still in
  // flight from the old one.
  cluster_.NewGeneration();
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (!cluster_.StoreActive(p)) continue;  // a PS that left, or has not joined yet
    absl::Status s = cluster_.CreateVariablesOn(p);
    if (!s.ok()) cluster_.report(absl::StrCat("membership change: ", cluster_.ps[p].admin->name(), ": ", s.message()));
  }
  // 4. Every member starts again where it stopped, with its streams.
  std::vector<absl::Status> started = cluster_.ForEachWorker([this](int i) {
    WorkerView& w = cluster_.workers[i];
    if (w.removed) return absl::OkStatus();
    // One that did not answer the pause is started when it answers: it
    // still holds the streams of the old deal, and a resume would let it
    // read those while others read them too (found by the simulation).
    if (!w.reachable) return absl::UnavailableError(absl::StrCat(w.control->name(), " did not answer the pause"));
    return cluster_.StartWorker(i, w.step);
  });
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    if (started[i].ok()) continue;
    cluster_.report(absl::StrCat("starting ", cluster_.workers[i].control->name(), ": ", started[i].message()));
    cluster_.workers[i].incarnation = 0;  // the watch starts it when it answers
  }
  ++cluster_.membership_changes;
  std::vector<std::string> names;
  for (int m : members) names.push_back(cluster_.workers[m].control->name());
  cluster_.report(absl::StrCat("membership: ", why, "; ", members.size(), " workers (", absl::StrJoin(names, ", "), ")",
                               cluster_.shape.sync ? absl::StrCat(", the SYNC group goes on at step ", group_step,
                                                                  " (generation ", cluster_.generation, ")")
                                                   : "",
                               "; training paused for ", absl::ToInt64Milliseconds(ChiefNow() - start), " ms"));
  return absl::OkStatus();
}

}  // namespace psrt
