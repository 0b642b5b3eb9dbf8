// WorkerRuntime: the pull / compute / push loop of one worker task, and the state
// machine the chief drives through the Worker service.
//
//   IDLE --Start--> RUNNING --Pause--> PAUSED --Resume--> RUNNING --end--> DONE
//                      |  a PS call fails (UNAVAILABLE, lost state)  ^
//                      +------> PAUSED, failure reported to chief ----+ Resume
//                      +------> FAILED (a bug or bad job: no retry)
//
// The invariant that matters: a gradient is pushed only if no Pause or
// Resume came between the pull it was computed from and its push. Pause
// waits for a push already on the wire (so a checkpoint taken after Pause
// returns sees it or not, never half), and a step interrupted anywhere else
// is dropped and recomputed. After a restore the chief resumes with a new
// generation and the step of the checkpoint, so nothing computed against the
// parameters before the restore is ever pushed to the ones after it.
//
// Thread-safe: gRPC handlers call Start/Pause/Resume/Status while the loop
// runs on its own thread.
#ifndef PSRT_WORKER_WORKER_RUNTIME_H_
#define PSRT_WORKER_WORKER_RUNTIME_H_

#include <atomic>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/chief_client.h"
#include "proto/worker_service.pb.h"
#include "common/input/dataset.h"
#include "worker/stream_input.h"
#include "common/compute/step_runner.h"
#include "worker/step_prefetcher.h"

namespace psrt {

struct WorkerDeps {
  std::function<absl::StatusOr<std::unique_ptr<ParameterClient>>(const WorkerAssignment&)>
      make_client;
  std::function<absl::StatusOr<std::unique_ptr<StepRunner>>(const WorkerAssignment&)> make_runner;
  // Default: the assignment's input, train split, this worker's shard.
  std::function<absl::StatusOr<std::unique_ptr<Dataset>>(const WorkerAssignment&)> make_dataset;
  // Tells the chief a PS call failed (may be null).
  std::function<void(const absl::Status&, int64_t step)> report_failure;
};

struct WorkerOptions {
  int index = 0;  // worker:index
  uint64_t incarnation = 0;
  // Fault injection: SIGKILL ourselves when about to run this step (0 =
  // never), so fault tests and demos kill a worker at a chosen step.
  int64_t kill_at_step = 0;
  // Fault injection: SIGSTOP ourselves with this step's gradients computed,
  // just before pushing them (0 = never): a worker that misses whatever the
  // chief does meanwhile and then pushes what it had, as a partitioned or
  // stalled one would.
  int64_t stop_before_push_at_step = 0;
  // ASYNC only: read the next batch and pull its parameters while this step
  // computes (see step_prefetcher.h for what that costs in staleness).
  bool overlap_pull = true;
  // ASYNC only (not in lockstep): push step t's gradients on a helper thread
  // while step t+1 reads, pulls and computes. At most one push is in flight
  // and step t+1's push leaves only once step t's is answered, so pushes
  // stay in step order and each is sent once; a failed one takes the worker
  // back to its step (the step computed meanwhile is dropped). Off by
  // default: on a machine whose cores are all busy (the 2-core development
  // VM running the whole cluster) it made the default job slower
  // (tests/bench/PS_BENCH_RESULTS.md); it pays where a push waits on the
  // network with cores to spare.
  bool overlap_push = false;
  // Bucketed push (issue #13): the step's dense gradients leave for their
  // PS in parts of about this many bytes per PS while the backward pass
  // makes the rest, last layers first (as Horovod and PyTorch DDP send
  // all-reduce buckets). Each part has its own request id (RequestId.bucket)
  // and the PS counts the step once it has all of them; once the first part
  // has left, the step's push is under way (a Pause waits for it) and is
  // completed. 0 = the whole step in one push after the backward pass.
  // Not with overlap_push, nor in lockstep (mirrored strategies), nor for
  // clients that cannot (the in-process one): those push whole.
  size_t push_bucket_bytes = 0;
  // Tests: appends "generation step stream batch unix_ms" for every step pushed,
  // so a test can check that each batch of each data stream was trained
  // once across membership changes ("" = no log).
  std::string data_log;
};

class WorkerRuntime {
 public:
  WorkerRuntime(WorkerOptions options, WorkerDeps deps);
  ~WorkerRuntime();  // Shutdown()

  // Takes an assignment and starts the loop. A new Start replaces a
  // finished, failed or idle run, or any run of an older generation (a
  // restarted chief); a second Start of the same generation while running is
  // FAILED_PRECONDITION.
  absl::Status Start(const WorkerAssignment& assignment);
  // Stops before the next push. Returns the first step not pushed.
  // Start, Pause and Resume are refused (FAILED_PRECONDITION) while another
  // of them is under way.
  // `abandon` (a failover, replicated shards): PS tasks whose calls in
  // flight are cancelled first (ParameterClient::Abandon), so that the pause
  // does not wait on a stopped or cut-off PS; the step they were for runs
  // again after the Resume.
  absl::StatusOr<int64_t> Pause(int64_t generation, absl::Duration timeout,
                                const std::vector<int>& abandon = {});
  // Continues from `start_step` under `generation`.
  // `route` (epoch > 0: replicated shards after a failover) re-routes the
  // client's pulls and pushes to the stores' new primaries.
  // `end_step` > 0 (early stopping) ends the run there instead: it must be
  // in [start_step, the assignment's end_step], else INVALID_ARGUMENT and
  // nothing changes; equal to start_step, the worker is DONE at once.
  absl::Status Resume(int64_t start_step, int64_t generation, const ReplicaRoute& route = ReplicaRoute(),
                      int64_t end_step = 0);
  // A paused worker's PS client made again for `a`'s placement and PS (a
  // PS joined or left; `a` is the current assignment with those replaced,
  // checked by the caller). FAILED_PRECONDITION unless paused, or for a
  // collective group. The old client is kept until the next Start: a
  // prefetch still in it finds it alive (and its old generation refused).
  absl::Status ReplaceClient(const WorkerAssignment& a);
  WorkerAssignment assignment() const;
  // Parks a running worker on its own (no chief to answer to): no further
  // push until the chief resumes it or starts it anew.
  void Park(const std::string& why);
  WorkerStatusResponse Status() const;
  uint64_t incarnation() const { return options_.incarnation; }
  Progress progress() const;
  // Stops the loop and joins it.
  void Shutdown();
  // Blocks until DONE or FAILED, or `timeout`; returns the state.
  WorkerStatusResponse::State WaitFinished(absl::Duration timeout) const;

 private:
  void Loop();
  // Reads the batch of `step` and pulls what it reads (any thread; the loop
  // thread waits for a prefetch before touching the dataset again).
  void FetchInputs(int64_t step, StepInputs* in);
  void RunStep(int64_t step, int64_t generation);
  // What a step's push ended in: progress figures on success, else the
  // failure handling (HandleStepFailure). `behind`: a push that overlapped
  // the next step (see WorkerOptions.overlap_push), whose failure takes
  // next_step_ back to `step` and drops the step computed meanwhile.
  struct PushDone {
    int64_t step, seen;
    int64_t examples;
    // The step's time, for examples/s: from start to the push's answer, or
    // for a push behind to when it left (the loop's pace).
    absl::Time start, left;
    float loss;
    int epoch;
    std::map<std::string, float> metrics;  // the step's training metrics
    bool pause_agreed = false;
    bool behind = false;
    int64_t generation = 0;  // for options_.data_log
  };
  void FinishPush(const PushDone& p, const absl::Status& status);
  // Retry (deadline), park and report (a PS failure) or fail the run.
  void HandleStepFailure(int64_t step, int64_t seen, const absl::Status& status);
  // Waits for a push behind (if any) to end and be accounted; whether it
  // failed. Loop thread, or after it has ended.
  bool JoinPushBehind() ABSL_LOCKS_EXCLUDED(mu_);
  void JoinLoop() ABSL_LOCKS_EXCLUDED(mu_);

  const WorkerOptions options_;
  const WorkerDeps deps_;
  // Held through Start, Pause and Resume: one at a time. One that finds
  // another under way is refused with FAILED_PRECONDITION (two Starts once
  // raced to reassign the loop's thread and crashed the worker; queued
  // Pauses each held a server thread).
  absl::Mutex control_mu_;
  std::atomic<bool> stopped_for_fault_{false};  // stop_before_push_at_step fires once
  std::atomic<bool> cancel_fetch_{false};       // set while a Start stops the loop
  std::atomic<bool> bucket_logged_{false};      // the first bucketed push is logged

  mutable absl::Mutex mu_;
  WorkerAssignment assignment_ ABSL_GUARDED_BY(mu_);
  WorkerStatusResponse::State state_ ABSL_GUARDED_BY(mu_) = WorkerStatusResponse::IDLE;
  bool pause_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Pushes committed to and not yet answered (two while a step waits for
  // its push behind): Pause waits for none.
  int pushing_ ABSL_GUARDED_BY(mu_) = 0;
  // The client runs steps in lockstep with a collective group (mirrored
  // strategies): a Pause is agreed in the step's all-reduce, never taken
  // alone between steps (ParameterClient::PushAgreeing).
  bool lockstep_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped by every Pause and Resume: a step that saw another value between
  // its pull and its push is dropped.
  int64_t interruptions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::string device_ ABSL_GUARDED_BY(mu_);
  float loss_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t loss_step_ ABSL_GUARDED_BY(mu_) = -1;  // the step of loss_ and metrics_ (-1: none this run)
  std::map<std::string, float> metrics_ ABSL_GUARDED_BY(mu_);
  double examples_per_sec_ ABSL_GUARDED_BY(mu_) = 0;
  int epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool behind_failed_ ABSL_GUARDED_BY(mu_) = false;  // see JoinPushBehind
  std::ofstream data_log_ ABSL_GUARDED_BY(mu_);  // options_.data_log

  // Owned by the loop thread while it runs.
  std::unique_ptr<ParameterClient> client_;
  std::vector<std::unique_ptr<ParameterClient>> retired_clients_;  // see ReplaceClient
  // Made by ReplaceClient (an RPC thread), installed by the loop thread at
  // its next step: the loop owns client_ and the prefetcher, so no other
  // thread swaps the one or joins the other's fetch.
  std::unique_ptr<ParameterClient> pending_client_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StepRunner> runner_;
  std::unique_ptr<StreamInput> input_;
  // Declared after what its fetches use, so it stops first.
  StepPrefetcher prefetcher_{[this](int64_t step, StepInputs* in) { FetchInputs(step, in); }};
  std::thread thread_;
  // The push of the previous step while it overlaps this one (overlap_push);
  // owned by the loop thread, joined by JoinLoop once the loop has ended.
  std::thread push_behind_;
};

}  // namespace psrt

#endif  // PSRT_WORKER_WORKER_RUNTIME_H_
