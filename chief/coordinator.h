// Coordinator: the chief's control loop. It never touches the per-step data
// path; it starts, watches, checkpoints and recovers.
//
// Run():
//   1. waits for every task of the spec to register (a deadline error lists
//      the missing ones);
//   2. plans the job (graph, gradients, pruning, placement), creates the
//      variables on every PS, and restores the newest committed checkpoint
//      (--restore=auto) or takes a first one at step 0, so that recovery
//      always has a consistent state to go back to;
//   3. starts every worker with its assignment and watches: progress lines,
//      checkpoints every N steps or seconds, evaluations, failures.
//
// Checkpoints are two-phase: workers pause (only in-flight pushes finish),
// every PS copies its state in memory, workers resume, the PS write their
// copies in the background, and only when every PS reports its copy durable
// does the chief commit a manifest (checkpoint_manifest.h).
//
// A PS that came back with a new incarnation means its state is gone:
// workers pause, the chief moves every PS to a new generation and restores
// the last committed checkpoint, and workers resume from its steps under
// that generation (a PS refuses pushes and pulls of any other, so a worker
// the chief could not reach cannot write into the restored values). A PS
// that only stops answering (hung, cut off) is waited for: workers park on
// their own failed calls, and resume where they were when it answers again
// with the same incarnation, without a restore. A worker that restarts is
// started again from its last step; ASYNC goes on without it meanwhile, SYNC
// waits for it (up to FailurePolicy.sync_wait_for_worker_ms).
//
// The chief never gives up on its own job: a failed checkpoint is abandoned
// (no manifest) and tried again with backoff, loudly; a failed recovery is
// retried with backoff; tasks that do not register or answer are waited for
// (FailurePolicy: for ever by default). Run() returns an error only for a
// job that cannot run (a bad job file, a worker that fails on its input).
//
// The coordinator is the shell of the watch core (core/watch_core.h): the
// core decides from what the stores and workers answer, the coordinator
// probes them and runs the core's commands through its parts, each acting
// on the cluster as the chief believes it is (chief_cluster.h):
// CheckpointCycle (checkpoint_cycle.h), RecoveryRunner (recovery.h),
// FailoverRunner (failover.h: replicated shards), GroupMembership
// (collective groups), WorkerMembership and PsMembership (elastic workers
// and PS).
//
// Status is thread-safe (gRPC threads). Workers' failure reports are logged
// by the chief service and not acted on here: what each PS answers the
// watch loop decides, so a stale or forged report changes nothing.
#ifndef PSRT_CHIEF_COORDINATOR_H_
#define PSRT_CHIEF_COORDINATOR_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/checkpoint_cycle.h"
#include "chief/chief_cluster.h"
#include "chief/coordinator_options.h"
#include "chief/core/watch_core.h"
#include "chief/failover.h"
#include "chief/group_membership.h"
#include "chief/ps_membership.h"
#include "chief/recovery.h"
#include "chief/task_registry.h"
#include "chief/worker_membership.h"
#include "common/optimizer.h"
#include "common/plan/early_stopping.h"
#include "common/plan/job_planner.h"
#include "common/plan/warm_start.h"
#include "common/rpc/channel_cache.h"
#include "proto/chief_service.pb.h"

namespace psrt {

// The payload (type URL) that marks Run()'s error as a worker refusing its
// assignment: the job cannot run as written, and a restarted chief would be
// refused the same way (the chief exits kExitJobRefused). Its value names
// the worker.
inline constexpr char kAssignmentRefusedPayload[] = "psrt/assignment-refused";
bool IsAssignmentRefused(const absl::Status& s);

class Coordinator {
 public:
  // Not owned: registry and channels outlive the coordinator.
  Coordinator(CoordinatorOptions options, TaskRegistry* registry, ChannelCache* channels, Planner planner,
              Evaluator evaluator);

  absl::StatusOr<JobSummary> Run();

  JobStatusResponse Status() const { return cluster_.Status(); }

 private:
  // Plans the job, creates the variables, restores (or starts fresh, or
  // the step --restore names), takes the first checkpoint, starts workers.
  absl::Status Setup();
  // job.warm_start's values when this is the job's first start (no
  // committed checkpoint of its own, or --restore=never); nullopt otherwise.
  // Errors (a source that does not fit) stop the job before it starts.
  absl::StatusOr<std::optional<WarmStartValues>> ReadWarmStartIfFirst();
  absl::Status WaitForRegistration();
  // One pass of watching; sets *done when every worker has finished. The
  // decisions are the core's (WatchCore); this runs its probes and commands.
  absl::Status Watch(bool* done);
  // Every watched store's / worker's status at once, so that a silent task
  // costs one deadline, not one per task.
  std::vector<std::optional<PsProbe>> ProbeStores();
  std::vector<std::optional<WorkerProbe>> ProbeWorkers();
  // The records the core decides on, and back from it.
  WatchState CoreState() const;
  void AdoptCoreState(const WatchState& state);
  // Runs one command of the core's; the pass goes on while it returns OK
  // and the command does not end it.
  absl::Status RunCommand(const WatchCommand& c);
  // The workers' losses, metrics and progress into the status page.
  void PublishProgress(const WorkerPass& workers);
  absl::Status Evaluate(int64_t step);
  // Early stopping said stop (`why`): pauses the workers, ends the run
  // where the furthest stands, records it in the job state and resumes
  // every worker with that end. Nothing when that is not before the end.
  void StopEarly(const std::string& why);
  void Report(bool force);

  ChiefCluster cluster_;
  const Planner planner_;
  const Evaluator evaluator_;
  const WatchCore core_;
  // The job's eval.early_stopping, fed each periodic evaluation (none: no
  // monitor, or no evaluator).
  std::optional<EarlyStopping> early_stopping_;
  // The parts, each acting on cluster_ (declared after it: built after it).
  CheckpointCycle checkpoints_;
  GroupMembership group_;
  RecoveryRunner recovery_;
  FailoverRunner failover_;
  WorkerMembership worker_membership_;
  PsMembership ps_membership_;

  // The most updates any store has applied (its global step), as last
  // probed: the job's schedule gives the learning rate there (status,
  // TensorBoard).
  int64_t stores_global_step_ = 0;
  std::unique_ptr<Optimizer> lr_schedule_;  // made on first use
  int64_t last_scalar_step_ = -1;           // the step of the last training scalars written
  absl::Time start_time_;
  absl::Time last_report_ = absl::InfinitePast();
};

}  // namespace psrt

#endif  // PSRT_CHIEF_COORDINATOR_H_
