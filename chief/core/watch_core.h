// WatchCore: the decisions of the chief's watch loop, with no I/O, no
// threads and no clock of its own.
//
// The coordinator is a shell around it: each pass it asks every store and
// every worker for its status at once (so a silent task costs one deadline,
// not one per task), hands the answers and the time to the core, and runs
// the commands the core returns (start or resume a worker, fail over,
// recover, change the membership, checkpoint, evaluate). What the chief
// believes about its tasks lives in WatchState, which the core updates; so
// the same decisions can be driven by a simulated cluster and a simulated
// clock (chief/core/cluster_sim.h), every history reproducible from a seed.
//
// The commands that change the cluster as a whole (recover, fail over,
// change the membership, fail) end a pass: the shell runs them and the next
// pass starts from fresh answers.
#ifndef PSRT_CHIEF_CORE_WATCH_CORE_H_
#define PSRT_CHIEF_CORE_WATCH_CORE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/input/streams.h"
#include "common/status_macros.h"
#include "proto/job.pb.h"
#include "proto/ps_service.pb.h"
#include "proto/worker_service.pb.h"

namespace psrt {

// What the chief believes of one parameter store: a PS task, or under a
// collective strategy one worker's replica.
struct PsRecord {
  std::string name;  // "ps:0", "worker:1 (replica)": for messages
  uint64_t incarnation = 0;
  absl::Time down_since = absl::InfiniteFuture();
  absl::Time last_said = absl::InfinitePast();
  int probes_timed_out = 0;  // in a row (replicated: see FailOverNow)
  // Not one of the job's PS (yet, or any more): a PS beyond the spec until
  // its share is moved there, one that left once it is moved off
  // (ps_membership.cc). Not watched, checkpointed nor restored.
  bool left = false;
  uint64_t refused = 0;  // the incarnation whose join or leave was refused (said once)
};

// What the chief believes of one worker.
struct WorkerRecord {
  std::string name;  // "worker:0": for messages
  uint64_t incarnation = 0;
  int64_t step = 0;  // next step to run, as last reported
  WorkerStatusResponse::State state = WorkerStatusResponse::IDLE;
  bool reachable = false;
  float loss = 0;
  int64_t loss_step = -1;  // the step `loss` is from (-1: none since it started)
  std::map<std::string, float> train_metric;  // of that step
  double examples_per_sec = 0;
  absl::Time down_since = absl::InfiniteFuture();
  // Gone long enough that training went on without it (ASYNC), the SYNC
  // group shrank, or (collective strategies) the all-reduce group was
  // re-formed without it; it rejoins when it answers again.
  bool removed = false;
  // Left for good (its own word: an operator stopped it); back only as
  // a new process (a new incarnation registers).
  bool left = false;
  // The incarnation a leave was claimed for while it still answered
  // (StillServing): said once.
  uint64_t leave_disbelieved = 0;
  // The data streams it reads (worker_membership.cc): where each stood
  // at step stream_base, read in turn one batch a step from there.
  std::vector<StreamPos> streams;
  int64_t stream_base = 0;
};

// The job's rules the watch applies; fixed for a run.
struct WatchRules {
  bool collective = false;  // workers all-reduce; stores: PS tasks, then one replica per worker
  bool sync = false;        // SYNC consistency (collective strategies always)
  bool replicated = false;  // replication.factor 2
  int num_ps_tasks = 0;
  absl::Duration failover_after = absl::Milliseconds(500);
  // A worker silent this long is given up on: ASYNC goes on without it
  // (heartbeat_timeout), a SYNC group shrinks (sync_wait); a collective
  // group's replica likewise (sync_wait).
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration sync_wait = absl::Seconds(30);
  int min_workers = 0;
  absl::Duration ps_wait = absl::InfiniteDuration();  // a PS silent longer fails the job
  int64_t checkpoint_every_steps = 0;
  absl::Duration checkpoint_every = absl::ZeroDuration();  // 0: not by time
  int64_t eval_every_steps = 0;  // 0, or no evaluator: no periodic evaluation
};

// What the chief believes between passes; the shell keeps it, the core
// reads and updates it.
struct WatchState {
  std::vector<PsRecord> ps;  // by store
  std::vector<bool> ps_lost;  // replicated: failed over (its stores moved)
  std::vector<WorkerRecord> workers;
  int64_t generation = 0;
  int64_t end_step = 0;
  int64_t last_checkpoint_step = -1;
  absl::Time last_checkpoint_time = absl::InfinitePast();
  absl::Time next_checkpoint_try = absl::InfinitePast();
  int64_t last_eval_step = 0;
};

// One store's answer to a status probe, or its error.
struct PsProbe {
  absl::Time asked;
  absl::Status error;  // OK: `answer` holds it
  PsStatusResponse answer;
};
struct WorkerProbe {
  absl::Status error;
  WorkerStatusResponse answer;
};

struct WatchCommand {
  enum Kind {
    kSay,           // a progress line: `why`
    kStartWorker,   // start worker `index` at `step` (its assignment)
    kResumeWorker,  // resume parked worker `index` at `step`
    // ASYNC: worker `index` came back as a new process (its record says
    // `step`). The shell asks every store for its status (what each applied
    // of the worker this generation, PsStatusResponse.worker_next_step) and
    // hands the answers to DecideRestart, which says where it starts.
    kRestartWorker,
    kFailover,          // PS task `index` is gone: promote its backups
    kRecover,           // back to the last checkpoint (`failure`: counted as one)
    kShrinkGroup,       // replica `index` is gone: the group goes on without it, from the checkpoint
    kChangeMembership,  // deal the data again among the members; `joining` become members
    kRejoinGroup,       // removed worker `index` is back: the collective group grows
    kFail,              // the job cannot go on: `code`, `why`
  };
  Kind kind = kSay;
  int index = -1;
  int64_t step = 0;
  absl::Duration down;  // kShrinkGroup: how long the replica has been silent
  bool failure = true;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::vector<int> joining;
  std::string why;

  // Whether the shell ends its pass after running it.
  bool EndsPass() const {
    return kind != kSay && kind != kStartWorker && kind != kResumeWorker && kind != kRestartWorker;
  }
};

struct PsPass {
  std::vector<WatchCommand> commands;  // at most one that ends the pass, last
  bool all_answer = true;              // every store the chief watches answers
  std::string waiting_for;             // the last silent one, for the status page
};

struct WorkerPass {
  std::vector<WatchCommand> commands;  // at most one that ends the pass, last
  bool all_done = false;               // every member said DONE
  double examples_per_sec = 0;         // the answering workers', summed
};

// What the watch does once the workers are seen and nothing ended the pass.
struct NextSteps {
  bool done = false;        // every member finished
  bool checkpoint = false;  // one is due
  bool evaluate = false;    // an evaluation is due
};

class WatchCore {
 public:
  explicit WatchCore(WatchRules rules) : rules_(rules) {}

  const WatchRules& rules() const { return rules_; }

  // The stores' answers (probes[s] empty: store s is not watched this pass)
  // at `now`.
  PsPass DecideStores(const std::vector<std::optional<PsProbe>>& probes, absl::Time now, WatchState* state) const;

  // The workers' answers (empty: not asked, it left) at `now`, the stores
  // all answering or not.
  WorkerPass DecideWorkers(const std::vector<std::optional<WorkerProbe>>& probes, bool all_stores_answer,
                           absl::Time now, WatchState* state) const;

  // kRestartWorker's answer: the stores' status (probes[s] empty: not
  // watched) asked after the worker came back. It starts at its first step,
  // from its record on, whose batch some store has not applied
  // (StreamFloors, FirstStepNotApplied): the steps before were applied
  // everywhere; a step some store applied and another did not is pushed
  // again, and a store that holds its batch answers "duplicate". While a
  // store is silent, or another incarnation or generation than the chief's
  // record, nothing (the next pass asks again: the worker could not push
  // anyway); an answer that names a negative stream or batch leaves it at
  // its record (the stores' dedupe still holds). Else a kSay and a
  // kStartWorker.
  std::vector<WatchCommand> DecideRestart(int index, const std::vector<std::optional<PsProbe>>& probes,
                                          WatchState* state) const;

  // After the workers, when nothing ended the pass: done, or a checkpoint
  // or an evaluation due.
  NextSteps DecideNext(bool all_done, bool all_stores_answer, absl::Time now, const WatchState& state) const;

  bool IsReplica(int store) const { return rules_.collective && store >= rules_.num_ps_tasks; }
  // A replicated PS silent for `down` is gone: a refused connection (it
  // died) after failover_after; probes that time out (hung, stopped, cut
  // off, or only slow on a loaded host) after two in a row, so one slow
  // answer is not taken for a death.
  bool FailOverNow(const PsRecord& ps, absl::Duration down) const;
  // Whether replica `store` (a member's), silent for `down`, is to leave
  // the group of `members`: past sync_wait, and with more members than
  // min_workers.
  bool ShrinkGroupNow(int store, int members, absl::Duration down) const;

 private:
  const WatchRules rules_;
};

// ASYNC: per data stream, the lowest next batch the stores applied
// (PsStatusResponse.stream_next_batch); a stream some answering store has
// no word of is left out. nullopt, and `why` says it, when an answer is not
// to be believed: a store that does not answer, is another incarnation or
// at another generation than the chief's record, or names a negative
// stream or batch.
std::optional<std::map<int, int64_t>> StreamFloors(const std::vector<std::optional<PsProbe>>& probes,
                                                   const WatchState& state, std::string* why);

// ASYNC: whether the answering stores applied the same batches of every
// stream. A checkpoint waits until they do: stores that differ hold a step
// a worker pushed to some and not others, and restored, the step's push
// again would be taken twice where it was. Nor while a store holds part
// of a batch (PsStatusResponse.stream_part_batch: its step's push came in
// parts and its pusher died between them). `why` says where they differ.
bool StoresAgreeOnStreams(const std::vector<std::optional<PsProbe>>& probes, std::string* why);

// The first step of `w`, from `from` (at most `end`), whose batch is not
// below its stream's floor: the first step some store has not applied.
int64_t FirstStepNotApplied(const WorkerRecord& w, int64_t from, const std::map<int, int64_t>& floors, int64_t end);

// Where the job stands: the lowest next step of the members (and of
// leavers still holding data streams), at most the end.
template <typename W>
int64_t MinStepOf(const std::vector<W>& workers, int64_t end_step) {
  int64_t m = end_step;
  for (const WorkerRecord& w : workers) {
    // A leaver still holding streams (no member was left to take them) is
    // where the job stands, not the end.
    if (!w.removed || !w.streams.empty()) m = std::min(m, w.step);
  }
  return m;
}

template <typename W>
std::vector<int> MembersOf(const std::vector<W>& workers) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(workers.size()); ++i) {
    if (!workers[i].removed) out.push_back(i);
  }
  return out;
}

// SYNC: the group's step at a membership change, the oldest step not
// applied. A member that answered the pause (`paused`) says it exactly: a
// step it passed was applied, which took every worker's push of it, the
// leavers' too. The record of one that did not answer may lag its pushes
// (a leaver killed after pushing step s is recorded at s while the PS
// applied s), so records count only when no member answered.
template <typename W>
int64_t GroupStep(const std::vector<W>& workers, const std::vector<bool>& paused, int64_t end_step) {
  int64_t exact = end_step, recorded = end_step;
  bool any_exact = false;
  for (int i = 0; i < static_cast<int>(workers.size()); ++i) {
    const WorkerRecord& w = workers[i];
    if (w.streams.empty()) continue;
    recorded = std::min(recorded, w.step);
    if (!w.removed && i < static_cast<int>(paused.size()) && paused[i]) {
      exact = std::min(exact, w.step);
      any_exact = true;
    }
  }
  return any_exact ? exact : recorded;
}

// After a restore, the data streams as a checkpoint saw them: `saved`
// holds, by worker, the positions of the streams it held at its checkpoint
// step. They are dealt among the members (a member keeps what it held; a
// holder that is no member now gives its streams to the others), each held
// from the step it resumes at (`step`, set before). With no member, the
// holders keep theirs until one joins. Returns the workers whose streams
// changed: they must be started with their new streams, not resumed (a
// worker whose record already reads the saved positions from its step
// keeps it, and may resume). Empty `saved` (a manifest written before
// stream positions were): nothing changes. INVALID_ARGUMENT, and nothing
// changed, for positions no checkpoint holds: a stream out of range or
// held twice, a negative batch, a holder that is no worker.
template <typename W>
absl::StatusOr<std::vector<int>> RestoreStreams(int num_streams, const std::map<int, std::vector<StreamPos>>& saved,
                                                std::vector<W>* workers) {
  std::vector<int> changed;
  if (saved.empty()) return changed;
  for (const auto& [holder, streams] : saved) {
    if (holder < 0 || holder >= static_cast<int>(workers->size())) {
      return absl::InvalidArgumentError(absl::StrCat("stream holder worker ", holder, " is not a worker of the job"));
    }
    for (const StreamPos& p : streams) {
      if (p.batch < 0) {
        return absl::InvalidArgumentError(absl::StrCat("stream ", p.index, " at batch ", p.batch, " (negative)"));
      }
    }
  }
  std::vector<int> members = MembersOf(*workers);
  std::map<int, std::vector<StreamPos>> dealt;
  // With no member the holders keep theirs: checked as a deal would be
  // (indices in range, none held twice), and kept as they are.
  RETURN_IF_ERROR(Deal(num_streams, members.empty() ? std::vector<int>{saved.begin()->first} : members, saved, &dealt));
  if (members.empty()) dealt = saved;
  for (int i = 0; i < static_cast<int>(workers->size()); ++i) {
    WorkerRecord& w = (*workers)[i];
    auto it = dealt.find(i);
    const std::vector<StreamPos> mine = it == dealt.end() ? std::vector<StreamPos>() : it->second;
    // Counting back before its base is only a guess (it stops at batch 0),
    // so a record read from there is never taken as the same.
    const bool same = w.streams.empty() ? mine.empty()
                                        : w.step >= w.stream_base && PositionsAt(w.streams, w.stream_base, w.step) == mine;
    if (same) continue;
    w.streams = mine;
    w.stream_base = w.step;
    changed.push_back(i);
  }
  return changed;
}

// The positions of every worker's streams at `steps` (by worker), as a
// checkpoint keeps them.
template <typename W>
std::map<int, std::vector<StreamPos>> StreamsAt(const std::vector<W>& workers, const std::vector<int64_t>& steps) {
  std::map<int, std::vector<StreamPos>> out;
  for (int i = 0; i < static_cast<int>(workers.size()) && i < static_cast<int>(steps.size()); ++i) {
    const WorkerRecord& w = workers[i];
    if (!w.streams.empty()) out[i] = PositionsAt(w.streams, w.stream_base, steps[i]);
  }
  return out;
}

}  // namespace psrt

#endif  // PSRT_CHIEF_CORE_WATCH_CORE_H_
