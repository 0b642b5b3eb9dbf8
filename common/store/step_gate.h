// StepGate: the part of a parameter server (server_core.h) that says when
// a worker's pull of a step may be answered, and holds those that may not
// yet.
//
// It owns:
//   - the job's consistency (ASYNC, SYNC, BOUNDED_STALENESS and its bound),
//     its number of workers and which of them count for staleness
//     (CreateVariablesRequest.active_workers);
//   - the step counters: the global step, the SYNC step, and each counting
//     worker's next step;
//   - the pulls parked until their step is ready, and the thread that fails
//     them at their deadline (DEADLINE_EXCEEDED).
//
//   SYNC               a pull of step t is ready once sync_step >= t.
//   BOUNDED_STALENESS  ready while t is at most `staleness` steps ahead of
//                      the slowest counting worker's next step.
//   ASYNC, worker < 0 (the chief), or once stopped: always ready.
//
// Locking: one mutex, mu(). The core also holds it for its record of
// pushes (PushLedger), so that a push's dedup check, its count and the step
// moving on are one. Order: taken after the core's variable lock
// (ParameterServerCore::mu_), never before it; under it the core may apply
// a SYNC step (each variable's own lock, the apply pool), nothing else. A
// parked pull's callback never runs under it: WaitOrRun, WakeWaiters, the
// sweeper and Stop run callbacks after letting it go, so a callback may
// take any lock of the server. Methods ending in Locked need mu() held; the
// others must be called without it.
//
//   StepGate gate;
//   gate.WaitOrRun(worker, step, deadline, [](absl::Status s) { ... });
//   { absl::MutexLock l(gate.mu()); gate.CountPushLocked(worker, step); }
//   gate.WakeWaiters();
#ifndef PSRT_COMMON_STORE_STEP_GATE_H_
#define PSRT_COMMON_STORE_STEP_GATE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps_service.pb.h"

namespace psrt {

class StepGate {
 public:
  // What a parked pull does once ready (OK) or failed (its status).
  using Run = std::function<void(absl::Status)>;

  // Most workers a job may have: num_workers sizes per-worker state, and
  // 2^31-1 workers meant a 16 GiB allocation (tests/fuzz/ps_request_fuzzer).
  static constexpr int kMaxWorkers = 1 << 16;

  // Starts the deadline sweeper.
  StepGate();
  // Stop(UNAVAILABLE) unless stopped already.
  ~StepGate();
  StepGate(const StepGate&) = delete;
  StepGate& operator=(const StepGate&) = delete;

  // Answers every parked pull with `why`, makes every later pull ready at
  // once, and joins the sweeper. Once only; the callbacks run on this
  // thread.
  void Stop(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex* mu() const ABSL_LOCK_RETURNED(mu_) { return &mu_; }

  // INVALID_ARGUMENT naming the field when what CreateVariables asks of the
  // gate is malformed: num_workers out of [1, kMaxWorkers], a negative
  // staleness, active_workers or their steps out of range, repeated, or of
  // lengths that disagree.
  static absl::Status CheckConfig(const CreateVariablesRequest& req);
  // Takes `req`'s consistency and workers (checked by CheckConfig). Each
  // active worker's start step: exact when `new_generation` (a resized
  // SYNC group may start again at an earlier step), else never backwards.
  void ConfigureLocked(const CreateVariablesRequest& req, bool new_generation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the parked pulls out, unanswered: the caller answers them once
  // it holds no lock (a new generation's, ABORTED).
  std::vector<Run> TakeParkedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Runs `run(OK)` now, on this thread, if a pull by `worker` of `step` is
  // ready; else parks it until it is (WakeWaiters) or `deadline` passes.
  void WaitOrRun(int worker, int64_t step, absl::Time deadline, Run run) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the parked pulls that are ready now. Call after a change that may
  // make some ready (a step counted, a reconfiguration, a restore).
  void WakeWaiters() ABSL_LOCKS_EXCLUDED(mu_);

  ConsistencyDef::Mode mode() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return consistency_.mode(); }
  int num_workers() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return num_workers_; }
  int64_t global_step() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return global_step_; }
  int64_t sync_step() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sync_step_; }
  const std::vector<int64_t>& worker_next_step() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return worker_next_step_;
  }

  // `worker` pushed `step` whole: its next step is after it. Only workers
  // that count for staleness are tracked (a worker id from the wire must not
  // size the vector: worker 2^31-1 would allocate 16 GiB); the step
  // saturates at INT64_MAX.
  void CountPushLocked(int worker, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An ASYNC or BOUNDED_STALENESS step applied: the global step after it.
  int64_t AdvanceGlobalStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ++global_step_; }
  // A SYNC step applied: the SYNC and global steps move on together.
  void AdvanceSyncStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++sync_step_;
    ++global_step_;
  }

  // Back to `step`: global step 0, the SYNC step and every worker's next
  // step at `step`.
  void ResetLocked(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The counters of this store's own snapshot of `step`; workers it lacks
  // start at `step`.
  void RestoreLocked(int64_t step, int64_t global_step, int64_t sync_step, std::vector<int64_t> worker_next_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A restore from another layout, whose counters mean nothing here: every
  // worker at `step`, the global step as given.
  void RestoreAllAtLocked(int64_t step, int64_t global_step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  struct Waiter {
    int worker;
    int64_t step;
    absl::Time deadline;
    Run run;  // reads and answers, or fails
  };

  bool ReadyLocked(int worker, int64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CountsForStalenessLocked(int worker) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slots worker_next_step_ needs: one per worker that counts.
  int StalenessSlotsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweepLoop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  ConsistencyDef consistency_ ABSL_GUARDED_BY(mu_);
  int num_workers_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t global_step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sync_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> worker_next_step_ ABSL_GUARDED_BY(mu_);
  // The workers BOUNDED_STALENESS waits for (CreateVariablesRequest.
  // active_workers), by index up to the highest; empty = 0..num_workers_-1.
  // Read for every push: a lookup, not a search.
  std::vector<bool> active_workers_ ABSL_GUARDED_BY(mu_);
  std::deque<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::thread sweeper_;  // last: started once everything above exists
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_STEP_GATE_H_
