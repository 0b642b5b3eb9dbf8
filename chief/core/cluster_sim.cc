#include "chief/core/cluster_sim.h"

#include <algorithm>
#include <deque>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(100);
// A blocking wait of the shell (a recovery waiting for every PS) gives up
// after this much virtual time and lets the next pass try again.
constexpr absl::Duration kShellWait = absl::Minutes(5);

// A deterministic generator of our own: the standard's distributions are
// not the same on every library, and a seed must replay everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  double Unit() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t s_;
};

// What the training has applied: the next batch of each data stream. Each
// PS holds one (the model state's record); a checkpoint copies it.
using Applied = std::vector<int64_t>;

struct SimPs {
  bool alive = true;
  bool answering = true;  // false: stopped (SIGSTOP), or cut off
  uint64_t incarnation = 0;
  int64_t generation = 0;
  bool created = false;  // variables created (a restarted PS holds none)
  Applied applied;
  std::vector<int64_t> worker_next;  // each worker's next step here
  // ASYNC: each stream's next batch applied here since the last restore
  // or fresh start (-1: none). A push of a batch below it is answered
  // "duplicate" and not applied (PsStatusResponse.stream_next_batch).
  std::vector<int64_t> stream_next;
  // ASYNC: a step's push to a PS comes in two parts (buckets). Model state,
  // copied by a checkpoint: whether the first part of batch applied[s] of
  // stream s is applied and its last is not (the pusher died between them).
  std::vector<bool> half;
  // The PS's record of that (PsStatusResponse.stream_part_batch; -1: none
  // since the last restore): a push of the batch again skips the part.
  std::vector<int64_t> part_batch;
  std::vector<bool> active;  // SYNC waits for these workers
  // SYNC: the step being aggregated, and who pushed it.
  int64_t sync_step = 0;
  std::vector<bool> sync_pushed;
  std::vector<StreamPos> sync_batch;       // what each pushed
  std::vector<uint64_t> sync_incarnation;  // and which process
  absl::Time back_at = absl::InfiniteFuture();
  bool restarts = false;  // at back_at: a new process (state lost)
};

struct SimWorker {
  bool alive = true;
  bool answering = true;
  uint64_t incarnation = 0;
  WorkerStatusResponse::State state = WorkerStatusResponse::IDLE;
  int64_t step = 0;
  int64_t end = 0;
  int64_t generation = 0;
  std::string error;
  std::vector<StreamPos> streams;
  int64_t stream_base = 0;
  absl::Time back_at = absl::InfiniteFuture();
  bool restarts = false;
};

struct SimCheckpoint {
  int64_t step = 0;
  std::vector<int64_t> worker_step;
  Applied applied;
  std::vector<bool> half;  // SimPs::half
  std::vector<int64_t> worker_next;
  std::map<int, std::vector<StreamPos>> streams;  // CheckpointManifest.stream
  // SYNC: the PS's step in the copy (a restored PS goes on from it, and
  // takes the group's pushes of the steps before as duplicates).
  int64_t sync_step = 0;
};

class Simulation {
 public:
  explicit Simulation(const SimOptions& o) : o_(o), rng_(o.seed), core_(Rules(o)) {
    now_ = absl::FromUnixSeconds(1700000000);
    ps_.resize(o.num_ps);
    for (SimPs& p : ps_) {
      p.incarnation = NewIncarnation();
      p.applied.assign(o.num_workers, 0);
      p.worker_next.assign(o.num_workers, 0);
      p.stream_next.assign(o.num_workers, -1);
      p.half.assign(o.num_workers, false);
      p.part_batch.assign(o.num_workers, -1);
      p.active.assign(o.num_workers, true);
    }
    workers_.resize(o.num_workers);
    for (SimWorker& w : workers_) w.incarnation = NewIncarnation();
  }

  SimResult Run() {
    ChiefStart();
    const absl::Time fault_end = start_ + o_.fault_window;
    const absl::Time give_up = fault_end + o_.finish_within;
    bool done = false;
    while (!done && now_ < give_up && result_.violations.empty()) {
      if (now_ < fault_end) MaybeFault();
      if (now_ < fault_end && o_.chief_restarts && rng_.Unit() < o_.fault_rate_per_s * absl::ToDoubleSeconds(kTick) / 8) {
        Log("chief restarted");
        ++result_.chief_restarts;
        ++result_.faults;
        ChiefStart();
        continue;
      }
      Tick();
      done = ChiefPass();
    }
    if (done) CheckDone();
    if (!done && result_.violations.empty()) {
      Violation(absl::StrCat("not done ", absl::FormatDuration(o_.finish_within), " after the last fault: ", Dump()));
    }
    result_.done = done;
    result_.virtual_time = now_ - start_;
    result_.history.assign(history_.begin(), history_.end());
    return std::move(result_);
  }

 private:
  static WatchRules Rules(const SimOptions& o) {
    WatchRules r;
    r.sync = o.sync;
    r.num_ps_tasks = o.num_ps;
    r.checkpoint_every_steps = o.checkpoint_every_steps;
    r.heartbeat_timeout = absl::Seconds(10);
    r.sync_wait = absl::Seconds(30);
    return r;
  }

  uint64_t NewIncarnation() { return ++incarnations_ * 1000003ull; }

  void Log(std::string line) {
    history_.push_back(absl::StrCat(absl::FormatDuration(now_ - start_), " ", line));
    if (history_.size() > 80) history_.pop_front();
  }
  void Violation(std::string what) {
    Log("VIOLATION: " + what);
    result_.violations.push_back(std::move(what));
  }

  std::string Dump() const {
    std::vector<std::string> parts;
    for (int p = 0; p < o_.num_ps; ++p) {
      parts.push_back(absl::StrCat("ps:", p, (ps_[p].alive ? "" : " dead"), (ps_[p].answering ? "" : " stopped"),
                                   (ps_[p].created ? "" : " empty"), " gen ", ps_[p].generation, " sync step ",
                                   ps_[p].sync_step));
    }
    for (int i = 0; i < o_.num_workers; ++i) {
      const SimWorker& w = workers_[i];
      parts.push_back(absl::StrCat("worker:", i, (w.alive ? "" : " dead"), (w.answering ? "" : " stopped"), " ",
                                   WorkerStatusResponse::State_Name(w.state), " step ", w.step, " gen ",
                                   w.generation, " of ", w.end, " streams ", w.streams.size(),
                                   (chief_.workers[i].removed ? " removed" : "")));
    }
    return absl::StrJoin(parts, "; ");
  }

  // ---- The cluster ----

  void MaybeFault() {
    if (rng_.Unit() >= o_.fault_rate_per_s * absl::ToDoubleSeconds(kTick)) return;
    ++result_.faults;
    const absl::Duration lasts = absl::Milliseconds(200 + rng_.Below(40000));
    const bool kill = rng_.Below(2) == 0;
    if (rng_.Below(2) == 0) {
      const int p = rng_.Below(o_.num_ps);
      SimPs& ps = ps_[p];
      if (!ps.alive || !ps.answering) return;
      Log(absl::StrCat(kill ? "kill" : "stop", " ps:", p, " for ", absl::FormatDuration(lasts)));
      (kill ? ps.alive : ps.answering) = false;
      ps.back_at = now_ + lasts;
      ps.restarts = kill;
    } else {
      const int i = rng_.Below(o_.num_workers);
      SimWorker& w = workers_[i];
      if (!w.alive || !w.answering) return;
      // It may push a few steps after the chief last heard from it (its
      // record lags), then dies.
      for (int k = kill ? rng_.Below(3) : 0; k > 0; --k) StepWorker(i);
      if (!result_.violations.empty()) return;
      Log(absl::StrCat(kill ? "kill" : "stop", " worker:", i, " at step ", w.step, " (recorded ",
                       chief_.workers[i].step, ") for ", absl::FormatDuration(lasts)));
      (kill ? w.alive : w.answering) = false;
      w.back_at = now_ + lasts;
      w.restarts = kill;
      // Between two buckets of its push to a PS: that PS applied part of
      // the step.
      const bool cut = rng_.Below(2) == 0;
      if (kill && !o_.sync && (o_.num_ps > 1 || cut) && w.state == WorkerStatusResponse::RUNNING && w.step < w.end &&
          rng_.Below(2) == 0) {
        // Killed in the middle of its step's pushes: some PS applied it,
        // the others never will.
        const int reached = cut ? 1 + rng_.Below(o_.num_ps) : 1 + rng_.Below(o_.num_ps - 1);
        bool all_up = true;
        for (int p = 0; p < reached; ++p) {
          const SimPs& ps = ps_[p];
          all_up = all_up && ps.alive && ps.answering && ps.created && ps.generation == w.generation;
        }
        if (all_up) {
          Log(absl::StrCat("worker:", i, " step ", w.step, " pushed to ", reached, " of ", o_.num_ps, " PS",
                           cut ? " (only the first bucket to the last)" : "", " before it died"));
          ++result_.partial_steps;
          if (cut) ++result_.bucket_cuts;
          for (int p = 0; p < reached; ++p) {
            if (!PushTo(i, p, /*first_bucket_only=*/cut && p == reached - 1)) return;
          }
        }
      }
    }
  }

  void Tick() {
    now_ += kTick;
    for (int p = 0; p < o_.num_ps; ++p) {
      SimPs& ps = ps_[p];
      if (now_ < ps.back_at) continue;
      ps.back_at = absl::InfiniteFuture();
      ps.answering = true;
      if (ps.restarts) {
        ps = SimPs();
        ps.incarnation = NewIncarnation();
        ps.applied.assign(o_.num_workers, 0);
        ps.worker_next.assign(o_.num_workers, 0);
        ps.stream_next.assign(o_.num_workers, -1);
        ps.half.assign(o_.num_workers, false);
        ps.part_batch.assign(o_.num_workers, -1);
        ps.active.assign(o_.num_workers, true);
        Log(absl::StrCat("ps:", p, " back (new incarnation, empty)"));
      } else {
        Log(absl::StrCat("ps:", p, " answers again"));
      }
    }
    for (int i = 0; i < o_.num_workers; ++i) {
      SimWorker& w = workers_[i];
      if (now_ < w.back_at) continue;
      w.back_at = absl::InfiniteFuture();
      w.answering = true;
      if (w.restarts) {
        w = SimWorker();
        w.incarnation = NewIncarnation();
        Log(absl::StrCat("worker:", i, " back (new incarnation, idle)"));
      } else {
        Log(absl::StrCat("worker:", i, " answers again"));
      }
    }
    // Workers step in a random order, one step a tick each.
    std::vector<int> order(o_.num_workers);
    for (int i = 0; i < o_.num_workers; ++i) order[i] = i;
    for (int i = o_.num_workers - 1; i > 0; --i) std::swap(order[i], order[rng_.Below(i + 1)]);
    // 0 to 2 steps each between two passes: the chief's record of a step
    // lags what the worker pushed, as on a real cluster.
    for (int i : order) {
      for (int k = rng_.Below(3); k > 0; --k) StepWorker(i);
    }
  }

  void StepWorker(int i) {
    SimWorker& w = workers_[i];
    if (!result_.violations.empty()) return;
    if (!w.alive || !w.answering || w.state != WorkerStatusResponse::RUNNING) return;
    if (w.step >= w.end) {
      w.state = WorkerStatusResponse::DONE;
      return;
    }
    for (SimPs& ps : ps_) {
      if (!ps.alive || !ps.answering || !ps.created || ps.generation != w.generation) {
        // Parked on its own failed call, as a real worker.
        w.state = WorkerStatusResponse::PAUSED;
        w.error = "a PS call failed";
        return;
      }
    }
    if (o_.sync) {
      StepSync(i);
      return;
    }
    for (int p = 0; p < o_.num_ps; ++p) {
      if (!PushTo(i, p)) return;
    }
    ++w.step;
    if (w.step >= w.end) w.state = WorkerStatusResponse::DONE;
  }

  // ASYNC: worker i's push of its step to ps:p, as the PS takes it: a batch
  // below what the PS applied of its stream since the restore is a
  // duplicate (acknowledged, not applied); any other is applied, and must
  // be its stream's next batch there. The duplicate must complete a step
  // some PS missed: a batch every PS applied pushed again means the chief
  // started a worker too early. The push comes in two buckets: a first one
  // the PS took of this batch since its last restore is skipped; one the
  // model holds that the PS does not remember is applied twice. False: a
  // violation.
  bool PushTo(int i, int p, bool first_bucket_only = false) {
    const SimWorker& w = workers_[i];
    SimPs& ps = ps_[p];
    const StreamPos batch = StreamAt(w.streams, w.stream_base, w.step);
    int64_t& next = ps.applied[batch.index];
    if (batch.batch < ps.stream_next[batch.index]) {
      bool everywhere = true;
      for (const SimPs& q : ps_) everywhere = everywhere && batch.batch < q.applied[batch.index];
      if (everywhere) {
        Violation(absl::StrCat("worker:", i, " step ", w.step, " pushed batch ", batch.batch, " of stream ",
                               batch.index, " again, which every PS had applied"));
        return false;
      }
      ++result_.duplicate_pushes;
      return true;
    }
    if (batch.batch < next) {
      Violation(absl::StrCat("worker:", i, " step ", w.step, " pushed batch ", batch.batch, " of stream ", batch.index,
                             " to ps:", p, " again (it had applied up to ", next, ")"));
      return false;
    }
    if (batch.batch > next) {
      Violation(absl::StrCat("worker:", i, " step ", w.step, " pushed batch ", batch.batch, " of stream ", batch.index,
                             " to ps:", p, ", skipping batches ", next, "..", batch.batch - 1));
      return false;
    }
    if (ps.part_batch[batch.index] == batch.batch) {
      ++result_.skipped_buckets;
    } else if (ps.half[batch.index]) {
      Violation(absl::StrCat("worker:", i, " step ", w.step, " pushed the first bucket of batch ", batch.batch,
                             " of stream ", batch.index, " to ps:", p, ", which had applied it"));
      return false;
    } else {
      ps.half[batch.index] = true;
      ps.part_batch[batch.index] = batch.batch;
    }
    if (first_bucket_only) return true;
    ps.half[batch.index] = false;
    ps.part_batch[batch.index] = -1;
    ++next;
    ps.stream_next[batch.index] = next;
    ps.worker_next[i] = std::max(ps.worker_next[i], w.step + 1);
    return true;
  }

  // SYNC: a worker pushes its step and waits; the PS apply the step once
  // every active worker pushed it (each worker's batch of it), and the
  // workers waiting on it go on. A push of the same step again (after a
  // pause) counts once, as the PS's record of pushes makes it.
  void StepSync(int i) {
    SimWorker& w = workers_[i];
    SimPs& first = ps_[0];
    if (w.step < first.sync_step) {
      // Applied already (pushed before this worker was killed and started
      // again from the chief's record): the PS answers "duplicate" and the
      // worker reads on.
      ++w.step;
      if (w.step >= w.end) w.state = WorkerStatusResponse::DONE;
      return;
    }
    if (w.step > first.sync_step) return;  // refused until the group gets there
    for (SimPs& ps : ps_) {
      if (ps.sync_pushed.size() != workers_.size()) ps.sync_pushed.assign(workers_.size(), false);
      ps.sync_batch.resize(workers_.size());
      ps.sync_incarnation.resize(workers_.size());
      ps.sync_pushed[i] = true;
      ps.sync_batch[i] = StreamAt(w.streams, w.stream_base, w.step);
      ps.sync_incarnation[i] = w.incarnation;
    }
    for (int j = 0; j < o_.num_workers; ++j) {
      if (first.active[j] && !first.sync_pushed[j]) return;
    }
    const int64_t step = first.sync_step;
    for (int j = 0; j < o_.num_workers; ++j) {
      if (!first.active[j]) continue;
      SimWorker& wj = workers_[j];
      const StreamPos batch = first.sync_batch[j];  // a worker killed since pushed it
      for (int p = 0; p < o_.num_ps; ++p) {
        int64_t& next = ps_[p].applied[batch.index];
        if (batch.batch != next) {
          Violation(absl::StrCat("SYNC step ", step, ": worker:", j, " pushed batch ", batch.batch, " of stream ",
                                 batch.index, " to ps:", p, " which had applied up to ", next));
          return;
        }
        ++next;
        ps_[p].worker_next[j] = step + 1;
      }
      if (wj.incarnation != first.sync_incarnation[j] || wj.step != step) continue;
      ++wj.step;
      if (wj.step >= wj.end && wj.state == WorkerStatusResponse::RUNNING) wj.state = WorkerStatusResponse::DONE;
    }
    for (SimPs& ps : ps_) {
      ps.sync_step = step + 1;
      ps.sync_pushed.assign(workers_.size(), false);
    }
  }

  // ---- The chief: the core and a shell acting on the simulated tasks ----

  // A chief (re)started: Coordinator::Setup.
  void ChiefStart() {
    if (start_ == absl::Time()) start_ = now_;
    chief_ = WatchState();
    chief_.end_step = o_.end_step;
    chief_.ps.resize(o_.num_ps);
    for (int p = 0; p < o_.num_ps; ++p) chief_.ps[p].name = absl::StrCat("ps:", p);
    chief_.ps_lost.assign(o_.num_ps, false);
    chief_.workers.resize(o_.num_workers);
    for (int i = 0; i < o_.num_workers; ++i) {
      chief_.workers[i].name = absl::StrCat("worker:", i);
      chief_.workers[i].down_since = absl::InfiniteFuture();
    }
    // Generations go on from the job's record and from what the tasks that
    // answer hold, never from a clock.
    int64_t floor = saved_generation_;
    for (const SimPs& ps : ps_) {
      if (ps.alive && ps.answering) floor = std::max(floor, ps.generation);
    }
    for (const SimWorker& w : workers_) {
      if (w.alive && w.answering) floor = std::max(floor, w.generation);
    }
    chief_.generation = floor;
    NewGeneration();
    DealStreams();
    if (!RestoreOrStartFresh()) return;  // the next pass finds what is missing
    if (chief_.last_checkpoint_step < 0) TryCheckpoint();
    chief_.last_checkpoint_time = now_;
    for (int i = 0; i < o_.num_workers; ++i) StartWorker(i, chief_.workers[i].step);
  }

  // Coordinator::DealStreams: every stream from its first batch, dealt
  // among the members.
  void DealStreams() {
    if (MembersOf(chief_.workers).empty()) {
      for (WorkerRecord& w : chief_.workers) {
        for (StreamPos& p : w.streams) p.batch = 0;
        w.stream_base = 0;
      }
      return;
    }
    std::map<int, std::vector<StreamPos>> dealt;
    (void)Deal(o_.num_workers, MembersOf(chief_.workers), {}, &dealt);
    for (WorkerRecord& w : chief_.workers) {
      w.streams.clear();
      w.stream_base = 0;
    }
    for (auto& [i, streams] : dealt) chief_.workers[i].streams = streams;
  }

  void NewGeneration() {
    ++chief_.generation;
    if (chief_.generation <= max_generation_) {
      Violation(absl::StrCat("generation ", chief_.generation, " handed out again (", max_generation_,
                             " was before)"));
    }
    max_generation_ = std::max(max_generation_, chief_.generation);
    saved_generation_ = chief_.generation;
  }

  bool PsAnswers(int p) const { return ps_[p].alive && ps_[p].answering; }

  // Coordinator::WaitForAllPs: the loop waits (time goes on) until every PS
  // answers, or gives up for this pass.
  bool WaitForAllPs() {
    const absl::Time until = now_ + kShellWait;
    while (now_ < until) {
      bool all = true;
      for (int p = 0; p < o_.num_ps; ++p) all = all && PsAnswers(p);
      if (all) return true;
      Tick();
    }
    return false;
  }

  // CreateVariablesOn: the PS at the chief's generation, its workers.
  void Configure(int p, bool reinitialize) {
    SimPs& ps = ps_[p];
    const bool new_generation = ps.generation != chief_.generation;
    ps.created = true;
    ps.generation = chief_.generation;
    for (int i = 0; i < o_.num_workers; ++i) {
      ps.active[i] = !chief_.workers[i].removed;
      if (reinitialize) {
        ps.worker_next[i] = 0;
      } else if (!chief_.workers[i].removed) {
        ps.worker_next[i] = new_generation ? chief_.workers[i].step : std::max(ps.worker_next[i], chief_.workers[i].step);
      }
    }
    if (reinitialize) ps.applied.assign(o_.num_workers, 0);
    if (reinitialize) ps.stream_next.assign(o_.num_workers, -1);
    if (reinitialize) ps.half.assign(o_.num_workers, false);
    if (reinitialize) ps.part_batch.assign(o_.num_workers, -1);
    if (new_generation || reinitialize) {
      // A new generation drops what was pushed of the step in progress
      // (ParameterServerCore::CreateVariables); the step stays.
      if (reinitialize) ps.sync_step = 0;
      ps.sync_pushed.assign(o_.num_workers, false);
    }
    chief_.ps[p].incarnation = ps.incarnation;
  }

  bool RestoreOrStartFresh() {
    redealt_.clear();
    if (!WaitForAllPs()) return false;
    NewGeneration();
    if (checkpoints_.empty()) {
      for (WorkerRecord& w : chief_.workers) w.step = 0;
      DealStreams();
      redealt_ = MembersOf(chief_.workers);  // started, with streams from batch 0
      for (int p = 0; p < o_.num_ps; ++p) Configure(p, /*reinitialize=*/true);
      chief_.last_checkpoint_step = -1;
      Log("started fresh");
      return true;
    }
    const SimCheckpoint& c = checkpoints_.back();
    for (int i = 0; i < o_.num_workers; ++i) chief_.workers[i].step = o_.sync ? c.step : c.worker_step[i];
    absl::StatusOr<std::vector<int>> dealt = RestoreStreams(o_.num_workers, c.streams, &chief_.workers);
    if (!dealt.ok()) {
      Violation(absl::StrCat("restoring the streams: ", dealt.status().message()));
    } else {
      redealt_ = *dealt;
    }
    for (int p = 0; p < o_.num_ps; ++p) {
      Configure(p, false);
      ps_[p].applied = c.applied;
      ps_[p].half = c.half;
      ps_[p].part_batch.assign(o_.num_workers, -1);
      ps_[p].worker_next = c.worker_next;
      ps_[p].sync_step = c.sync_step;
      ps_[p].stream_next.assign(o_.num_workers, -1);  // a restore forgets what was pushed since
    }
    chief_.last_checkpoint_step = c.step;
    // The restored state and the steps the workers resume at must agree:
    // each member's streams, where its step finds them, at the batches the
    // restored model has applied.
    CheckStreamsMatch(c.applied, "restored checkpoint of step " + std::to_string(c.step), c.sync_step);
    Log(absl::StrCat("restored the checkpoint of step ", c.step, " at generation ", chief_.generation));
    return true;
  }

  // `sync_step` (SYNC): the PS's own step, past which a member's pushes
  // count; the steps before it are taken as duplicates (a worker's record
  // may be behind what the PS applied with its push).
  void CheckStreamsMatch(const Applied& applied, const std::string& what, int64_t sync_step) {
    for (int i = 0; i < o_.num_workers; ++i) {
      const WorkerRecord& w = chief_.workers[i];
      if (w.streams.empty()) continue;
      const int64_t step = o_.sync && !w.removed ? std::max(w.step, sync_step) : w.step;
      for (const StreamPos& s : PositionsAt(w.streams, w.stream_base, step)) {
        if (s.batch != applied[s.index]) {
          Violation(absl::StrCat(what, ": worker:", i, " at step ", w.step, " would read stream ", s.index,
                                 " from batch ", s.batch, ", but the model has applied its batches up to ",
                                 applied[s.index]));
          return;
        }
      }
    }
  }

  void StartWorker(int i, int64_t step) {
    WorkerRecord& r = chief_.workers[i];
    SimWorker& w = workers_[i];
    if (!w.alive || !w.answering) {
      r.incarnation = 0;  // the watch starts it when it answers
      return;
    }
    if (r.removed) return;
    Log(absl::StrCat("start worker:", i, " at step ", step, " generation ", chief_.generation, " streams ",
                     absl::StrJoin(PositionsAt(r.streams, r.stream_base, step), " ",
                                   [](std::string* out, const StreamPos& p) { absl::StrAppend(out, p.index, "@", p.batch); })));
    w.state = WorkerStatusResponse::RUNNING;
    w.step = step;
    w.end = o_.end_step;
    w.generation = chief_.generation;
    w.streams = r.streams;
    w.stream_base = r.stream_base;
    w.error.clear();
    r.step = step;
    r.state = WorkerStatusResponse::RUNNING;
    r.incarnation = w.incarnation;
    r.reachable = true;
  }

  // Coordinator::PauseWorkers: the members the chief believes running or
  // parked are paused at a step boundary and say their step (a worker
  // answers with its own next step, whatever process it is); returns which
  // paused. One that does not answer is marked unreachable.
  std::vector<bool> PauseWorkers(bool mark_unreachable = false) {
    std::vector<bool> paused(o_.num_workers, false);
    for (int i = 0; i < o_.num_workers; ++i) {
      WorkerRecord& r = chief_.workers[i];
      SimWorker& w = workers_[i];
      if ((!r.reachable && (!mark_unreachable || r.incarnation == 0)) || r.removed ||
          (r.state != WorkerStatusResponse::RUNNING && r.state != WorkerStatusResponse::PAUSED)) {
        continue;
      }
      if (!w.alive || !w.answering) {
        r.reachable = false;
        continue;
      }
      if (r.incarnation != 0 && w.incarnation != r.incarnation) {
        // Another process answers (PauseResponse.incarnation): its step
        // says nothing of the old one's pushes; the watch restarts it.
        r.reachable = false;
        continue;
      }
      if (w.state == WorkerStatusResponse::RUNNING) w.state = WorkerStatusResponse::PAUSED;
      w.error.clear();
      r.step = w.step;  // its answer: the step it stopped before
      r.reachable = true;
      paused[i] = true;
    }
    return paused;
  }

  bool TryCheckpoint() {
    if (now_ < chief_.next_checkpoint_try) return false;
    // Coordinator::Checkpoint: pause, every PS copies, resume, commit.
    std::vector<bool> active(o_.num_workers);
    for (int i = 0; i < o_.num_workers; ++i) {
      const WorkerRecord& r = chief_.workers[i];
      // Coordinator::Checkpoint: a member that does not answer refuses it.
      active[i] = !r.removed && (r.state == WorkerStatusResponse::RUNNING || r.state == WorkerStatusResponse::PAUSED);
    }
    std::vector<bool> paused = PauseWorkers();
    bool ok = true;
    for (int i = 0; i < o_.num_workers; ++i) {
      if (active[i] && !paused[i]) ok = false;  // one that may still push makes the copy inconsistent
    }
    for (int p = 0; p < o_.num_ps; ++p) ok = ok && PsAnswers(p) && ps_[p].incarnation == chief_.ps[p].incarnation;
    std::string differ;
    if (ok && !o_.sync && !StoresAgreeOnStreams(ProbeStores(), &differ)) {
      Log("checkpoint waits: " + differ);
      ok = false;
    }
    const int64_t step = MinStepOf(chief_.workers, chief_.end_step);
    SimCheckpoint c;
    c.step = step;
    for (const WorkerRecord& r : chief_.workers) c.worker_step.push_back(o_.sync && !r.removed ? step : r.step);
    if (ok) {
      for (int p = 0; p < o_.num_ps; ++p) {
        for (int k = 0; k < o_.num_workers; ++k) {
          if (ps_[p].half[k]) {
            Violation(absl::StrCat("a checkpoint copies part of a batch of stream ", k, " on ps:", p));
          }
        }
      }
      c.applied = ps_[0].applied;
      c.half = ps_[0].half;
      c.worker_next = ps_[0].worker_next;
      c.sync_step = ps_[0].sync_step;
      for (int p = 1; p < o_.num_ps; ++p) {
        if (ps_[p].applied != c.applied || ps_[p].half != c.half) {
          Violation(absl::StrCat("ps:", p, " and ps:0 hold different states"));
        }
      }
    }
    for (int i = 0; i < o_.num_workers; ++i) {
      if (!paused[i]) continue;
      workers_[i].state = WorkerStatusResponse::RUNNING;
      workers_[i].step = c.worker_step[i];
      chief_.workers[i].step = c.worker_step[i];
    }
    if (!ok) {
      chief_.next_checkpoint_try = now_ + absl::Seconds(1);
      return false;
    }
    // The manifest names these steps for this state: they must agree.
    std::vector<int64_t> saved_steps;
    for (WorkerRecord& r : chief_.workers) saved_steps.push_back(r.step);
    for (int i = 0; i < o_.num_workers; ++i) chief_.workers[i].step = c.worker_step[i];
    CheckStreamsMatch(c.applied, "checkpoint of step " + std::to_string(step), c.sync_step);
    for (int i = 0; i < o_.num_workers; ++i) chief_.workers[i].step = saved_steps[i];
    c.streams = StreamsAt(chief_.workers, c.worker_step);
    checkpoints_.push_back(c);
    ++result_.checkpoints;
    chief_.last_checkpoint_step = step;
    chief_.last_checkpoint_time = now_;
    chief_.next_checkpoint_try = absl::InfinitePast();
    Log(absl::StrCat("checkpoint of step ", step, " committed"));
    return true;
  }

  void Recover(const std::string& why) {
    Log("recovering: " + why);
    ++result_.recoveries;
    PauseWorkers();
    std::vector<int64_t> reached;
    for (const WorkerRecord& r : chief_.workers) reached.push_back(r.step);
    if (!RestoreOrStartFresh()) return;
    for (int i = 0; i < o_.num_workers; ++i) {
      result_.rolled_back_steps += std::max<int64_t>(0, reached[i] - chief_.workers[i].step);
    }
    for (int i = 0; i < o_.num_workers; ++i) {
      WorkerRecord& r = chief_.workers[i];
      if (r.removed) {
        r.incarnation = 0;  // what it says of its steps predates the restore
        continue;
      }
      SimWorker& w = workers_[i];
      if (!r.reachable || !w.alive || !w.answering || w.incarnation != r.incarnation) {
        r.incarnation = 0;  // the watch starts it when it answers
        continue;
      }
      if (w.state == WorkerStatusResponse::DONE ||
          std::find(redealt_.begin(), redealt_.end(), i) != redealt_.end()) {
        StartWorker(i, r.step);
      } else {
        w.state = WorkerStatusResponse::RUNNING;
        w.error.clear();
        w.step = r.step;
        w.generation = chief_.generation;
        r.state = WorkerStatusResponse::RUNNING;
      }
    }
  }

  // Coordinator::ChangeMembership.
  void ChangeMembership(const std::string& why, const std::vector<int>& joining) {
    ++result_.membership_changes;
    // Coordinator::ChangeMembership: a holder coming back says its step.
    for (int i : joining) {
      WorkerRecord& r = chief_.workers[i];
      SimWorker& w = workers_[i];
      if (r.streams.empty() || r.incarnation == 0 || !w.alive || !w.answering || w.incarnation != r.incarnation) {
        continue;
      }
      w.state = WorkerStatusResponse::PAUSED;
      r.step = std::clamp(w.step, r.step, chief_.end_step);
    }
    const std::vector<bool> paused = PauseWorkers(/*mark_unreachable=*/true);
    for (int i = 0; i < o_.num_workers; ++i) {
      if (!workers_[i].alive || !workers_[i].answering) chief_.workers[i].reachable = false;
    }
    // ASYNC: a holder that did not answer the pause (killed, cut off) may
    // have pushed past its record: its streams go on after the last batch
    // every PS applied (a step some took and others not is pushed again by
    // the next holder, a duplicate where it was taken).
    if (!o_.sync) {
      std::string why;
      const std::optional<std::map<int, int64_t>> floors = StreamFloors(ProbeStores(), chief_, &why);
      for (int i = 0; i < o_.num_workers; ++i) {
        WorkerRecord& r = chief_.workers[i];
        if (r.streams.empty() || paused[i] || !floors.has_value()) continue;
        const int64_t step = FirstStepNotApplied(r, r.step, *floors, chief_.end_step);
        if (step != r.step) Log(absl::StrCat("worker:", i, " pushed up to step ", step, ", past its record ", r.step));
        r.step = step;
      }
    }
    // Coordinator::SyncGroupStep: SYNC asks the PS.
    int64_t group_step = GroupStep(chief_.workers, paused, chief_.end_step);
    if (o_.sync) {
      int64_t lowest = chief_.end_step;
      bool all = true;
      for (int p = 0; p < o_.num_ps; ++p) {
        all = all && PsAnswers(p) && ps_[p].incarnation == chief_.ps[p].incarnation;
        if (all) lowest = std::min(lowest, ps_[p].sync_step);
      }
      if (all) group_step = lowest;
    }
    int64_t old_min = chief_.end_step;
    for (const WorkerRecord& w : chief_.workers) {
      if (!w.streams.empty() && !w.removed) old_min = std::min(old_min, w.step);
    }
    if (old_min == chief_.end_step) old_min = group_step;
    std::map<int, std::vector<StreamPos>> held;
    for (int i = 0; i < o_.num_workers; ++i) {
      const WorkerRecord& w = chief_.workers[i];
      if (!w.streams.empty()) held[i] = PositionsAt(w.streams, w.stream_base, o_.sync ? group_step : w.step);
    }
    for (int i : joining) {
      chief_.workers[i].removed = chief_.workers[i].left = false;
      chief_.workers[i].step = o_.sync ? group_step : old_min;
    }
    const std::vector<int> members = MembersOf(chief_.workers);
    Log(absl::StrCat("membership: ", why, "; ", members.size(), " members"));
    if (members.empty()) return;
    std::map<int, std::vector<StreamPos>> dealt;
    if (!Deal(o_.num_workers, members, held, &dealt).ok()) {
      Violation("the deal failed");
      return;
    }
    for (int i = 0; i < o_.num_workers; ++i) {
      WorkerRecord& w = chief_.workers[i];
      if (w.removed) {
        w.streams.clear();
        continue;
      }
      if (o_.sync) w.step = group_step;
      w.streams = dealt[i];
      w.stream_base = w.step;
    }
    NewGeneration();
    for (int p = 0; p < o_.num_ps; ++p) {
      if (PsAnswers(p)) Configure(p, false);
    }
    for (int i = 0; i < o_.num_workers; ++i) {
      WorkerRecord& w = chief_.workers[i];
      if (w.removed) continue;
      if (!w.reachable) {
        w.incarnation = 0;  // started with its new streams when it answers
        continue;
      }
      StartWorker(i, w.step);
    }
  }

  std::vector<std::optional<PsProbe>> ProbeStores() {
    std::vector<std::optional<PsProbe>> out(o_.num_ps);
    for (int p = 0; p < o_.num_ps; ++p) {
      PsProbe probe;
      probe.asked = now_;
      if (!ps_[p].alive) {
        probe.error = absl::UnavailableError("connection refused");
      } else if (!ps_[p].answering) {
        probe.error = absl::DeadlineExceededError("deadline exceeded");
      } else {
        probe.answer.set_incarnation(ps_[p].incarnation);
        probe.answer.set_generation(ps_[p].generation);
        if (!o_.sync) {
          for (int k = 0; k < o_.num_workers; ++k) {
            if (ps_[p].stream_next[k] >= 0) (*probe.answer.mutable_stream_next_batch())[k] = ps_[p].stream_next[k];
            if (ps_[p].part_batch[k] >= 0) (*probe.answer.mutable_stream_part_batch())[k] = ps_[p].part_batch[k];
          }
        }
      }
      out[p] = probe;
    }
    return out;
  }

  std::vector<std::optional<WorkerProbe>> ProbeWorkers() {
    std::vector<std::optional<WorkerProbe>> out(o_.num_workers);
    for (int i = 0; i < o_.num_workers; ++i) {
      if (chief_.workers[i].left) continue;
      const SimWorker& w = workers_[i];
      WorkerProbe probe;
      if (!w.alive) {
        probe.error = absl::UnavailableError("connection refused");
      } else if (!w.answering) {
        probe.error = absl::DeadlineExceededError("deadline exceeded");
      } else {
        probe.answer.set_incarnation(w.incarnation);
        probe.answer.set_state(w.state);
        probe.answer.set_step(w.step);
        probe.answer.set_generation(w.generation);
        probe.answer.set_error(w.error);
      }
      out[i] = probe;
    }
    return out;
  }

  // Runs a command; false: the job failed.
  bool RunCommand(const WatchCommand& c) {
    switch (c.kind) {
      case WatchCommand::kSay:
        Log(c.why);
        return true;
      case WatchCommand::kStartWorker:
        StartWorker(c.index, c.step);
        return true;
      case WatchCommand::kRestartWorker:
        // Coordinator::RunCommand: the stores asked, the core decides.
        for (const WatchCommand& next : core_.DecideRestart(c.index, ProbeStores(), &chief_)) {
          if (!RunCommand(next)) return false;
        }
        return true;
      case WatchCommand::kResumeWorker: {
        SimWorker& w = workers_[c.index];
        if (w.alive && w.answering && w.incarnation == chief_.workers[c.index].incarnation) {
          Log(absl::StrCat("resume worker:", c.index, " at step ", c.step));
          w.state = WorkerStatusResponse::RUNNING;
          w.error.clear();
          w.step = c.step;
          w.generation = chief_.generation;
        }
        return true;
      }
      case WatchCommand::kRecover:
        Recover(c.why);
        return true;
      case WatchCommand::kChangeMembership:
        ChangeMembership(c.why, c.joining);
        return true;
      case WatchCommand::kFail:
        Violation("the job failed: " + c.why);
        return false;
      case WatchCommand::kFailover:
      case WatchCommand::kShrinkGroup:
      case WatchCommand::kRejoinGroup:
        Violation(absl::StrCat("command ", c.kind, " from a job shape the simulation does not model"));
        return false;
    }
    return false;
  }

  // One pass of Coordinator::Watch; true when the job is done.
  bool ChiefPass() {
    const PsPass stores = core_.DecideStores(ProbeStores(), now_, &chief_);
    for (const WatchCommand& c : stores.commands) {
      if (!RunCommand(c) || c.EndsPass()) return false;
    }
    const WorkerPass ws = core_.DecideWorkers(ProbeWorkers(), stores.all_answer, now_, &chief_);
    for (const WatchCommand& c : ws.commands) {
      if (!RunCommand(c) || c.EndsPass()) return false;
    }
    const NextSteps next = core_.DecideNext(ws.all_done, stores.all_answer, now_, chief_);
    if (next.done) return true;
    if (next.checkpoint) TryCheckpoint();
    return false;
  }

  // Done: every member at the end, and the model holds each batch the
  // members read exactly once (checked as they were pushed).
  void CheckDone() {
    for (int i = 0; i < o_.num_workers; ++i) {
      const WorkerRecord& r = chief_.workers[i];
      if (r.removed && r.streams.empty()) continue;
      if (r.removed) {
        Violation(absl::StrCat("done with worker:", i, " removed but still holding its data streams"));
      } else if (workers_[i].step != o_.end_step || workers_[i].state != WorkerStatusResponse::DONE) {
        Violation(absl::StrCat("done with worker:", i, " at step ", workers_[i].step, " (",
                               WorkerStatusResponse::State_Name(workers_[i].state), "), not ", o_.end_step));
      }
    }
    Log("done");
  }

  const SimOptions o_;
  Rng rng_;
  const WatchCore core_;
  absl::Time now_;
  absl::Time start_;
  uint64_t incarnations_ = 0;
  std::vector<SimPs> ps_;
  std::vector<SimWorker> workers_;
  // The chief's memory (lost when it restarts) ...
  WatchState chief_;
  std::vector<int> redealt_;  // the last restore changed their streams
  // ... and what it keeps on disk (the manifests, the job state).
  std::vector<SimCheckpoint> checkpoints_;
  int64_t saved_generation_ = 0;
  int64_t max_generation_ = 0;
  std::deque<std::string> history_;
  SimResult result_;
};

}  // namespace

SimOptions SimOptionsForSeed(uint64_t seed) {
  Rng rng(seed ^ 0x5151);
  SimOptions o;
  o.seed = seed;
  o.num_ps = 1 + rng.Below(3);
  o.num_workers = 1 + rng.Below(4);
  o.sync = rng.Below(2) == 0;
  o.end_step = 100 + rng.Below(400);
  o.checkpoint_every_steps = 10 + rng.Below(60);
  return o;
}

SimResult RunSimulation(const SimOptions& options) { return Simulation(options).Run(); }

}  // namespace psrt
