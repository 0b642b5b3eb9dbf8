#include "chief/core/watch_core.h"

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

WatchCommand Say(std::string line) {
  WatchCommand c;
  c.kind = WatchCommand::kSay;
  c.why = std::move(line);
  return c;
}

WatchCommand Command(WatchCommand::Kind kind, int index, std::string why) {
  WatchCommand c;
  c.kind = kind;
  c.index = index;
  c.why = std::move(why);
  return c;
}

WatchCommand Fail(absl::StatusCode code, std::string why) {
  WatchCommand c = Command(WatchCommand::kFail, -1, std::move(why));
  c.code = code;
  return c;
}

std::string Seconds(absl::Duration d) { return absl::FormatDuration(absl::Trunc(d, absl::Seconds(1))); }

}  // namespace

bool WatchCore::FailOverNow(const PsRecord& ps, absl::Duration down) const {
  return down >= rules_.failover_after && (ps.probes_timed_out == 0 || ps.probes_timed_out >= 2);
}

bool WatchCore::ShrinkGroupNow(int store, int members, absl::Duration down) const {
  if (!IsReplica(store)) return false;
  return down >= rules_.sync_wait && members > std::max(1, rules_.min_workers);
}

PsPass WatchCore::DecideStores(const std::vector<std::optional<PsProbe>>& probes, absl::Time now,
                               WatchState* state) const {
  // A new incarnation means lost state, and a restore (a failover when
  // replicated). One that does not answer is waited for: its state may be
  // intact (hung, cut off), and workers park on their own failed calls.
  PsPass out;
  std::string lost;
  const int n = std::min(static_cast<int>(probes.size()), static_cast<int>(state->ps.size()));
  for (int p = 0; p < n; ++p) {
    if (!probes[p].has_value()) continue;  // not watched: not the job's, or its stores moved
    PsRecord& ps = state->ps[p];
    const PsProbe& probe = *probes[p];
    if (probe.error.ok()) {
      const PsStatusResponse& st = probe.answer;
      if (ps.down_since != absl::InfiniteFuture() && st.incarnation() == ps.incarnation) {
        out.commands.push_back(Say(absl::StrCat(
            ps.name, " answers again after ", absl::FormatDuration(absl::Trunc(now - ps.down_since, absl::Milliseconds(1))),
            " with its state intact (same incarnation): no restore")));
      }
      ps.down_since = absl::InfiniteFuture();
      ps.probes_timed_out = 0;
      if (st.incarnation() != ps.incarnation) {
        if (rules_.replicated) {
          out.all_answer = false;
          out.commands.push_back(
              Command(WatchCommand::kFailover, p, "restarted (new incarnation): what it held is gone"));
          return out;
        }
        lost = absl::StrCat(ps.name, " restarted (new incarnation)");
      } else if (st.generation() != state->generation) {
        lost = absl::StrCat(ps.name, " is at generation ", st.generation(), ", not ", state->generation);
      }
      continue;
    }
    // Replicated: silent since the probe went out (it waited its deadline).
    if (ps.down_since == absl::InfiniteFuture()) ps.down_since = rules_.replicated ? probe.asked : now;
    ps.probes_timed_out = probe.error.code() == absl::StatusCode::kDeadlineExceeded ? ps.probes_timed_out + 1 : 0;
    const absl::Duration down = now - ps.down_since;
    out.all_answer = false;
    if (rules_.replicated && FailOverNow(ps, down)) {
      out.commands.push_back(Command(WatchCommand::kFailover, p,
                                     absl::StrCat("not answering for ", absl::FormatDuration(down), ": ",
                                                  probe.error.message())));
      return out;
    }
    if (ShrinkGroupNow(p, static_cast<int>(MembersOf(state->workers).size()), down)) {
      ps.down_since = absl::InfiniteFuture();
      WatchCommand c = Command(WatchCommand::kShrinkGroup, p,
                               absl::StrCat(ps.name, " is gone: re-forming the collective group without it"));
      c.down = down;
      out.commands.push_back(std::move(c));
      return out;
    }
    out.waiting_for = absl::StrCat(ps.name, " (not answering for ", Seconds(down), ": ", probe.error.message(), ")");
    if (now - ps.last_said >= absl::Minutes(1)) {
      ps.last_said = now;
      out.commands.push_back(Say(absl::StrCat("waiting for ", out.waiting_for)));
    }
    if (down > rules_.ps_wait) {
      out.commands.push_back(Fail(absl::StatusCode::kUnavailable,
                                  absl::StrCat(ps.name, " did not answer within ps_wait_ms ",
                                               absl::ToInt64Milliseconds(rules_.ps_wait), ": ",
                                               probe.error.message())));
      return out;
    }
  }
  if (!lost.empty()) out.commands.push_back(Command(WatchCommand::kRecover, -1, lost));
  return out;
}

WorkerPass WatchCore::DecideWorkers(const std::vector<std::optional<WorkerProbe>>& probes, bool all_stores_answer,
                                    absl::Time now, WatchState* state) const {
  WorkerPass out;
  out.all_done = true;
  const absl::Duration give_up = rules_.sync ? rules_.sync_wait : rules_.heartbeat_timeout;
  const int n = std::min(static_cast<int>(probes.size()), static_cast<int>(state->workers.size()));
  for (int i = 0; i < n; ++i) {
    WorkerRecord& w = state->workers[i];
    if (w.left || !probes[i].has_value()) continue;  // gone for good; back only as a new process
    const WorkerProbe& probe = *probes[i];
    if (!probe.error.ok()) {
      if (w.down_since == absl::InfiniteFuture()) {
        out.commands.push_back(Say(absl::StrCat(w.name, " is down: ", probe.error.message())));
        w.down_since = now;
      }
      w.reachable = false;
      // A collective group cannot go on without a member: its replica is
      // waited for like a PS (DecideStores), and the group re-formed when
      // it is back.
      // ASYNC hands its streams on from the last batch every PS applied
      // (the record may lag): that waits for every store's word.
      if (!rules_.collective && !w.removed && now - w.down_since > give_up && (rules_.sync || all_stores_answer) &&
          static_cast<int>(MembersOf(state->workers).size()) > rules_.min_workers) {
        w.removed = true;
        // Its data goes to the others (a SYNC group shrinks with it).
        WatchCommand c = Command(WatchCommand::kChangeMembership, i,
                                 absl::StrCat(w.name, " did not answer for ", absl::FormatDuration(give_up),
                                              rules_.sync ? ": the SYNC group shrinks" : ": ASYNC training goes on without it",
                                              " and its data goes to the others"));
        out.commands.push_back(std::move(c));
        out.all_done = false;
        return out;
      }
      if (!w.removed) out.all_done = false;
      continue;
    }
    const WorkerStatusResponse& st = probe.answer;
    w.reachable = true;
    w.down_since = absl::InfiniteFuture();
    // Restarted, idle, or back after it was given up on (hung or cut off,
    // it may still run on with what it had): started again at its step.
    if (st.incarnation() != w.incarnation || st.state() == WorkerStatusResponse::IDLE || w.removed) {
      out.all_done = false;
      if (w.removed) {
        // ASYNC: as a leaver's streams, a returner's wait for every store.
        if (!rules_.sync && !rules_.collective && !all_stores_answer) continue;
        w.state = st.state();
        if (rules_.collective) {
          out.commands.push_back(Command(WatchCommand::kRejoinGroup, i, absl::StrCat(w.name, " answers again")));
        } else {
          WatchCommand c = Command(WatchCommand::kChangeMembership, i, absl::StrCat(w.name, " answers again"));
          c.joining = {i};
          out.commands.push_back(std::move(c));
        }
        return out;
      }
      // The same incarnation with no restore since (a restore zeroes the
      // incarnation of workers it could not reach): what it pushed stands.
      int64_t step = st.incarnation() == w.incarnation ? std::max(w.step, st.step()) : w.step;
      if (rules_.sync) step = std::min(step, MinStepOf(state->workers, state->end_step));
      if (!rules_.sync && !rules_.collective && w.incarnation != 0 && st.incarnation() != w.incarnation) {
        // A new process: the old one may have pushed past its record. What
        // the stores applied of it says where it stands (DecideRestart).
        // Not one a restore or a membership change could not reach
        // (incarnation 0): it has pushed nothing in this generation, and
        // starts at its record.
        WatchCommand c = Command(WatchCommand::kRestartWorker, i, "");
        c.step = step;
        out.commands.push_back(std::move(c));
        continue;
      }
      out.commands.push_back(Say(absl::StrCat(w.name, " (re)started; starting it at step ", step)));
      WatchCommand c = Command(WatchCommand::kStartWorker, i, "");
      c.step = step;
      out.commands.push_back(std::move(c));
      continue;
    }
    w.state = st.state();
    w.step = st.step();
    w.loss = st.loss();
    w.loss_step = st.loss_step();
    w.train_metric.clear();
    for (const auto& [name, value] : st.train_metric()) w.train_metric[name] = value;
    w.examples_per_sec = st.examples_per_sec();
    out.examples_per_sec += w.examples_per_sec;
    if (w.state == WorkerStatusResponse::FAILED) {
      out.all_done = false;
      out.commands.push_back(Fail(absl::StatusCode::kAborted, absl::StrCat(w.name, " failed: ", st.error())));
      return out;
    }
    if (rules_.collective && w.state == WorkerStatusResponse::PAUSED && all_stores_answer && !st.error().empty()) {
      // Parked on a failed all-reduce: the group is broken and the replicas
      // may differ by a step. Re-form it from the last checkpoint.
      out.all_done = false;
      out.commands.push_back(
          Command(WatchCommand::kRecover, -1, absl::StrCat(w.name, " left the collective group: ", st.error())));
      return out;
    }
    if (w.state == WorkerStatusResponse::PAUSED && all_stores_answer) {
      // Parked on its own (a PS call failed, or it lost the chief), and
      // every store answers with its incarnation and generation: whatever
      // it was is over. Let it go on.
      WatchCommand c = Command(WatchCommand::kResumeWorker, i, "");
      c.step = w.step;
      out.commands.push_back(std::move(c));
    }
    if (w.state != WorkerStatusResponse::DONE) out.all_done = false;
  }
  return out;
}

std::optional<std::map<int, int64_t>> StreamFloors(const std::vector<std::optional<PsProbe>>& probes,
                                                   const WatchState& state, std::string* why) {
  std::map<int, int64_t> floors;
  std::map<int, int> told;  // how many stores named each stream
  int answering = 0;
  const int n = std::min(static_cast<int>(probes.size()), static_cast<int>(state.ps.size()));
  for (int p = 0; p < n; ++p) {
    if (!probes[p].has_value()) continue;
    const PsRecord& ps = state.ps[p];
    const PsProbe& probe = *probes[p];
    if (!probe.error.ok()) {
      *why = absl::StrCat(ps.name, " does not answer: ", probe.error.message());
      return std::nullopt;
    }
    const PsStatusResponse& st = probe.answer;
    if (st.incarnation() != ps.incarnation || st.generation() != state.generation) {
      *why = absl::StrCat(ps.name, " is incarnation ", st.incarnation(), " at generation ", st.generation(), ", not ",
                          ps.incarnation, " at ", state.generation);
      return std::nullopt;
    }
    ++answering;
    for (const auto& [stream, batch] : st.stream_next_batch()) {
      if (stream < 0 || batch < 0) {
        *why = absl::StrCat(ps.name, " says stream ", stream, " is applied up to batch ", batch);
        return std::nullopt;
      }
      auto [it, first] = floors.emplace(stream, batch);
      if (!first) it->second = std::min(it->second, batch);
      ++told[stream];
    }
  }
  for (const auto& [stream, count] : told) {
    if (count < answering) floors.erase(stream);
  }
  return floors;
}

bool StoresAgreeOnStreams(const std::vector<std::optional<PsProbe>>& probes, std::string* why) {
  const PsProbe* first = nullptr;
  int first_index = -1;
  for (int p = 0; p < static_cast<int>(probes.size()); ++p) {
    if (!probes[p].has_value() || !probes[p]->error.ok()) continue;
    for (const auto& [stream, batch] : probes[p]->answer.stream_part_batch()) {
      *why = absl::StrCat("store ", p, " applied part of batch ", batch, " of stream ", stream);
      return false;
    }
    if (first == nullptr) {
      first = &*probes[p];
      first_index = p;
      continue;
    }
    const auto& a = first->answer.stream_next_batch();
    const auto& b = probes[p]->answer.stream_next_batch();
    for (const auto& [stream, batch] : b) {
      auto it = a.find(stream);
      if (it == a.end() || it->second != batch) {
        *why = absl::StrCat("store ", p, " applied stream ", stream, " up to batch ", batch, ", store ", first_index,
                            it == a.end() ? std::string(" none of it") : absl::StrCat(" up to ", it->second));
        return false;
      }
    }
    if (a.size() != b.size()) {
      *why = absl::StrCat("stores ", first_index, " and ", p, " applied batches of different streams");
      return false;
    }
  }
  return true;
}

int64_t FirstStepNotApplied(const WorkerRecord& w, int64_t from, const std::map<int, int64_t>& floors, int64_t end) {
  if (w.streams.empty()) return from;
  int64_t step = from;
  for (; step < end; ++step) {
    const StreamPos b = StreamAt(w.streams, w.stream_base, step);
    auto it = floors.find(b.index);
    if (it == floors.end() || b.batch >= it->second) break;
  }
  return step;
}

std::vector<WatchCommand> WatchCore::DecideRestart(int index, const std::vector<std::optional<PsProbe>>& probes,
                                                   WatchState* state) const {
  std::vector<WatchCommand> out;
  if (index < 0 || index >= static_cast<int>(state->workers.size())) return out;
  WorkerRecord& w = state->workers[index];
  const int64_t record = std::clamp<int64_t>(w.step, 0, state->end_step);
  // A store silent, or not the one the chief set up (a restore is coming):
  // not now. It stays idle (it could not push anyway), and the next pass
  // asks again; a store that answers is believed alone.
  const int n = std::min(static_cast<int>(probes.size()), static_cast<int>(state->ps.size()));
  for (int p = 0; p < n; ++p) {
    if (!probes[p].has_value()) continue;
    const PsProbe& probe = *probes[p];
    if (!probe.error.ok() || probe.answer.incarnation() != state->ps[p].incarnation ||
        probe.answer.generation() != state->generation) {
      return out;
    }
  }
  std::string why;
  const std::optional<std::map<int, int64_t>> floors = StreamFloors(probes, *state, &why);
  int64_t step = record;
  if (!floors.has_value()) {
    out.push_back(Say(absl::StrCat(w.name, " (re)started; starting it at its recorded step ", record, " (", why, ")")));
  } else {
    step = FirstStepNotApplied(w, record, *floors, state->end_step);
    out.push_back(Say(absl::StrCat(w.name, " (re)started; starting it at step ", step, " (recorded ", record,
                                   "), the first whose batch some store has not applied")));
  }
  WatchCommand c = Command(WatchCommand::kStartWorker, index, "");
  c.step = step;
  out.push_back(std::move(c));
  return out;
}

NextSteps WatchCore::DecideNext(bool all_done, bool all_stores_answer, absl::Time now, const WatchState& state) const {
  NextSteps next;
  // Done is every member's word, and a job with no member (its only
  // workers left, as an eviction's SIGTERM does) is not done: the steps
  // the leavers did not train wait for a worker to join or come back.
  if (all_done && !MembersOf(state.workers).empty()) {
    next.done = true;
    return next;
  }
  const int64_t step = MinStepOf(state.workers, state.end_step);
  const bool by_steps =
      rules_.checkpoint_every_steps > 0 && step >= state.last_checkpoint_step + rules_.checkpoint_every_steps;
  const bool by_time =
      rules_.checkpoint_every > absl::ZeroDuration() && now - state.last_checkpoint_time >= rules_.checkpoint_every;
  next.checkpoint = (by_steps || by_time) && step > state.last_checkpoint_step && all_stores_answer &&
                    now >= state.next_checkpoint_try;
  next.evaluate =
      rules_.eval_every_steps > 0 && step >= state.last_eval_step + rules_.eval_every_steps && all_stores_answer;
  return next;
}

}  // namespace psrt
