// A parameter server joins or leaves a running job (issue #14): the chief
// moves whole variables (placement_move.h says which) to the joiner, or
// off the leaver, with a two-phase copy.
//
// Invariant: every acknowledged push is in the state the new owner goes
// on from, once. Phase one copies each moved variable while workers keep
// pushing (a warm-up: it makes the variables on the target and moves most
// of the bytes while nothing waits). Phase two stops every worker at a
// step boundary (Pause returns once its in-flight push is answered), then
// moves every PS to a new generation with the new placement: from that
// moment a push or pull of the old generation is refused everywhere
// (FAILED_PRECONDITION), so a worker the chief could not pause writes
// nothing more into the source's copy. Only then is the last copy taken,
// loaded on the target, and dropped from the source; workers start again
// at their steps with the new placement. A push that reaches the old owner
// after the switch is refused by the generation fence and never applied
// there; a worker that retries it does so under the new placement. Until
// the switch the sources keep their variables, so a failure before it
// (a copy or load refused, a target gone) puts the old placement back at
// yet another generation and loses nothing.
#include "chief/ps_membership.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

std::vector<int> PsMembership::LivePs() const {
  std::vector<int> out;
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (!cluster_.shape.IsReplica(p) && !cluster_.ps[p].left) out.push_back(p);
  }
  return out;
}

absl::StatusOr<bool> PsMembership::Watch() {
  for (auto it = pending_drops_.begin(); it != pending_drops_.end();) {
    MoveVariablesRequest r;
    for (const std::string& n : it->second) r.add_drop(n);
    it = cluster_.ps[it->first].admin->MoveVariables(r).ok() ? pending_drops_.erase(it) : std::next(it);
  }
  // PS registered beyond the views: one each, live once its share moved.
  for (int n = cluster_.registry->NumPs(); cluster_.NumPs() < n;) {
    const TaskId t = MakeTaskId(kPsJob, cluster_.NumPs());
    PsView v;
    v.name = TaskName(t);
    v.admin = std::make_unique<PsAdmin>(cluster_.channels->Get(cluster_.registry->Get(t).info.address()), v.name);
    v.left = true;
    cluster_.ps.push_back(std::move(v));
  }
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    PsView& ps = cluster_.ps[p];
    const TaskState t = cluster_.registry->Get(MakeTaskId(kPsJob, p));
    const uint64_t inc = t.info.incarnation();
    std::string why;
    absl::StatusOr<PsMovePlan> plan;
    int joining = -1, leaving = -1;
    if (ps.left && inc != 0 && !t.left && inc != ps.incarnation && inc != ps.refused) {
      why = ps.admin->name() + " joins";
      joining = p;
      plan = PlanPsJoin(cluster_.plan.placement, LivePs(), p);
    } else if (!ps.left && t.left && inc == ps.incarnation && inc != ps.refused) {
      why = ps.admin->name() + " leaves";
      leaving = p;
      plan = PlanPsLeave(cluster_.plan.placement, LivePs(), p);
    } else {
      continue;
    }
    absl::Status s = plan.status();
    if (s.ok()) s = MoveVariables(*plan, why, joining, leaving);
    if (!s.ok()) {
      ps.refused = inc;
      cluster_.report(absl::StrCat("ps membership: ", why, ", refused: ", s.message()));
    }
    return true;
  }
  return false;
}

absl::Status PsMembership::MoveVariables(const PsMovePlan& plan, const std::string& why, int joining, int leaving) {
  const absl::Time start = ChiefNow();
  const PlacementMap before = cluster_.plan.placement;
  std::map<int, std::vector<std::string>> from;  // source PS -> variables
  std::map<std::string, int> to;
  std::set<int> targets;
  for (const ShardMove& m : plan.moves) {
    from[m.from].push_back(m.variable);
    to[m.variable] = m.to;
    targets.insert(m.to);
  }
  if (joining >= 0) targets.insert(joining);
  // Copies every moved variable from its source to its target at the
  // current generation (a PS at another refuses); returns the bytes moved.
  auto copy = [&]() -> absl::StatusOr<int64_t> {
    int64_t bytes = 0;
    std::map<int, MoveVariablesRequest> loads;
    for (const auto& [src, names] : from) {
      MoveVariablesRequest r;
      for (const std::string& n : names) r.add_copy(n);
      r.set_generation(cluster_.generation);
      ASSIGN_OR_RETURN(MoveVariablesResponse resp, cluster_.ps[src].admin->MoveVariables(r));
      if (resp.state_size() != static_cast<int>(names.size())) {
        return absl::InternalError(absl::StrCat(cluster_.ps[src].admin->name(), " answered ", resp.state_size(),
                                                " variables' state for ", names.size(), " asked"));
      }
      bytes += resp.bytes();
      for (int k = 0; k < resp.state_size(); ++k) {
        if (resp.state(k).def().name() != names[k]) {
          return absl::InternalError(absl::StrCat(cluster_.ps[src].admin->name(), " answered the state of \"",
                                                  resp.state(k).def().name().substr(0, 128), "\" for ", names[k]));
        }
        *loads[to[names[k]]].add_load() = std::move(*resp.mutable_state(k));
      }
    }
    for (auto& [dst, r] : loads) {
      r.set_generation(cluster_.generation);
      RETURN_IF_ERROR(cluster_.ps[dst].admin->MoveVariables(r).status());
    }
    return bytes;
  };
  // Drops `names` from PS `p`; one it cannot reach drops them at the next
  // pass (WatchPsMembership), so its snapshots hold no stale copy for long.
  auto drop = [this](int p, const std::vector<std::string>& names) {
    MoveVariablesRequest r;
    for (const std::string& n : names) r.add_drop(n);
    absl::Status d = cluster_.ps[p].admin->MoveVariables(r).status();
    if (d.ok()) return;
    std::vector<std::string>& pending = pending_drops_[p];
    pending.insert(pending.end(), names.begin(), names.end());
    cluster_.report(absl::StrCat("dropping moved variables from ", cluster_.ps[p].admin->name(),
                                 " (tried again later): ", d.message()));
  };
  // A move abandoned: what live targets made for it goes (a joiner is not
  // live: nothing reads or snapshots it).
  auto undo_targets = [&] {
    std::map<int, std::vector<std::string>> made;
    for (const ShardMove& m : plan.moves) {
      if (m.to != joining) made[m.to].push_back(m.variable);
    }
    for (const auto& [t, names] : made) drop(t, names);
  };
  // Phase one, training going on: the targets make what they take (at the
  // current generation; nothing routes there yet) and load a first copy.
  cluster_.plan.placement = plan.placement;
  absl::Status created;
  for (int t : targets) {
    absl::Status c = cluster_.CreateVariablesOn(t);
    if (!c.ok() && created.ok()) created = c;
  }
  absl::StatusOr<int64_t> warm = created.ok() ? copy() : absl::StatusOr<int64_t>(created);
  if (!warm.ok()) {
    cluster_.plan.placement = before;
    undo_targets();
    return absl::Status(warm.status().code(), absl::StrCat("copying while training: ", warm.status().message()));
  }
  const absl::Duration warm_time = ChiefNow() - start;

  // Phase two: workers stopped at a step boundary, every PS fenced at a new
  // generation with the new placement, the last copy, the switch.
  const absl::Time pause_start = ChiefNow();
  const std::vector<bool> paused_here = cluster_.PauseWorkers({}, /*mark_unreachable=*/true);
  const absl::Duration stopping = ChiefNow() - pause_start;
  std::vector<int> live = LivePs();
  if (joining >= 0) live.push_back(joining);
  cluster_.NewGeneration();
  absl::Status fenced;
  for (int p : live) {
    absl::Status c = cluster_.CreateVariablesOn(p);
    if (!c.ok() && fenced.ok()) fenced = c;
  }
  const absl::Time last_copy_start = ChiefNow();
  const absl::Duration fencing = last_copy_start - pause_start - stopping;
  absl::StatusOr<int64_t> last = fenced.ok() ? copy() : absl::StatusOr<int64_t>(fenced);
  const absl::Duration last_copy = ChiefNow() - last_copy_start;
  if (!last.ok()) {
    // Nothing switched: the sources still hold every acknowledged push.
    cluster_.plan.placement = before;
    cluster_.NewGeneration();
    for (int p : LivePs()) {
      absl::Status c = cluster_.CreateVariablesOn(p);
      if (!c.ok()) {
        cluster_.report(
            absl::StrCat("putting the placement back on ", cluster_.ps[p].admin->name(), ": ", c.message()));
      }
    }
    undo_targets();
  } else {
    if (joining >= 0) cluster_.ps[joining].left = false;
    if (leaving >= 0) cluster_.ps[leaving].left = true;
    for (const auto& [src, names] : from) drop(src, names);
  }
  const absl::Time starting = ChiefNow();
  // Each worker paused here goes on with the new placement (only its PS
  // client is made again); any other is started anew.
  std::vector<absl::Status> started = cluster_.ForEachWorker([&](int i) {
    WorkerView& w = cluster_.workers[i];
    if (w.removed || !w.reachable) return absl::OkStatus();
    if (paused_here[i] &&
        w.control->ResumePlaced(w.step, cluster_.generation, cluster_.AssignmentFor(i, w.step), cluster_.ResumeEndStep(w.step)).ok()) {
      w.state = WorkerStatusResponse::RUNNING;
      return absl::OkStatus();
    }
    return cluster_.StartWorker(i, w.step);
  });
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    if (started[i].ok()) continue;
    cluster_.report(absl::StrCat("starting ", cluster_.workers[i].control->name(), ": ", started[i].message()));
    cluster_.workers[i].incarnation = 0;  // the watch starts it when it answers
  }
  const absl::Duration paused = ChiefNow() - pause_start;
  if (!last.ok()) {
    return absl::Status(last.status().code(),
                        absl::StrCat("the last copy failed, the old placement put back (training paused for ",
                                     absl::ToInt64Milliseconds(paused), " ms): ", last.status().message()));
  }
  ++moves_;
  std::vector<std::string> moves;
  for (const ShardMove& m : plan.moves) moves.push_back(absl::StrCat(m.variable, " ps:", m.from, "->ps:", m.to));
  cluster_.report(absl::StrCat(
      "ps membership: ", why, "; ", LivePs().size(), " PS; moved ", plan.moves.size(), " variables (", *last,
      " bytes: ", absl::StrJoin(moves, ", "), "); copied while training in ", absl::ToInt64Milliseconds(warm_time),
      " ms, then training paused for ", absl::ToInt64Milliseconds(paused), " ms (stopping the workers ",
      absl::ToInt64Milliseconds(stopping), " ms, every PS to the new generation ", absl::ToInt64Milliseconds(fencing),
      " ms, the last copy ", absl::ToInt64Milliseconds(last_copy), " ms, starting the workers ",
      absl::ToInt64Milliseconds(ChiefNow() - starting), " ms) at generation ", cluster_.generation));
  return absl::OkStatus();
}

}  // namespace psrt
