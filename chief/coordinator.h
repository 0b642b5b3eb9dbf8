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
// A PS that died or came back with a new incarnation means its state is
// gone: workers pause, every PS restores the last committed checkpoint, and
// workers resume from its steps under a new generation. A worker that
// restarts is started again from its last step; ASYNC goes on without it
// meanwhile, SYNC waits for it (up to FailurePolicy.sync_wait_for_worker_ms).
//
// Status/OnFailureReport/CommandFor are thread-safe (gRPC threads).
#ifndef PSRT_CHIEF_COORDINATOR_H_
#define PSRT_CHIEF_COORDINATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "chief/checkpoint_manifest.h"
#include "chief/cluster_clients.h"
#include "common/plan/job_plan.h"
#include "chief/task_registry.h"
#include "common/cluster_spec.h"
#include "common/rpc/channel_cache.h"
#include "proto/chief_service.pb.h"
#include "proto/job.pb.h"

namespace psrt {

struct CoordinatorOptions {
  TrainingJob job;
  ClusterSpec cluster;
  std::string checkpoint_dir;  // overrides job.checkpoint.dir when set
  std::string restore = "auto";  // auto | never | a step
  uint64_t incarnation = 0;
  // Gets each progress line (default: LOG(INFO)).
  std::function<void(const std::string&)> report;
  // Gets each scalar for TensorBoard (loss, examples/s, eval metrics).
  std::function<void(const std::string& tag, int64_t step, float value)> scalar;
  absl::Duration poll_interval = absl::Milliseconds(100);
  // Fault injection for tests: SIGKILL the chief just before it commits its
  // Nth checkpoint (after every PS made that snapshot durable). 0 = never.
  int fault_kill_before_commit = 0;
  absl::Duration report_interval = absl::Seconds(2);
};

struct JobSummary {
  std::string job_name;
  int64_t steps = 0;  // per worker
  int64_t total_steps = 0;
  int64_t restored_from_step = -1;
  double wall_seconds = 0;
  double examples_per_sec = 0;              // the run's mean: examples trained / wall_seconds
  double examples_per_sec_last_window = 0;  // the workers' last heartbeat figures, summed
  float final_loss = 0;
  std::map<std::string, float> metrics;  // final evaluation
  std::vector<int64_t> checkpoints;
  int failures_survived = 0;
  std::string checkpoint_dir;

  std::string ToJson() const;
};

class Coordinator {
 public:
  // Not owned: registry and channels outlive the coordinator.
  Coordinator(CoordinatorOptions options, TaskRegistry* registry, ChannelCache* channels,
              Planner planner, Evaluator evaluator);

  absl::StatusOr<JobSummary> Run();

  JobStatusResponse Status() const;
  void OnFailureReport(const ReportFailureRequest& report);

 private:
  struct WorkerView {
    std::unique_ptr<WorkerControl> control;
    uint64_t incarnation = 0;
    int64_t step = 0;  // next step to run, as last reported
    WorkerStatusResponse::State state = WorkerStatusResponse::IDLE;
    bool reachable = false;
    float loss = 0;
    double examples_per_sec = 0;
    absl::Time down_since = absl::InfiniteFuture();
    // Gone long enough that training went on without it (ASYNC) or the
    // SYNC group shrank; it rejoins when it answers again.
    bool removed = false;
  };
  struct PsView {
    std::unique_ptr<PsAdmin> admin;
    uint64_t incarnation = 0;
  };

  absl::Status Setup();
  absl::Status CreateVariablesOn(int ps);
  absl::Status StartWorker(int i, int64_t step);
  WorkerAssignment AssignmentFor(int i, int64_t step) const;
  // One pass of watching; sets *done when every worker has finished.
  absl::Status Watch(bool* done);
  absl::Status Checkpoint();
  absl::Status WaitDurable(int64_t step);
  absl::Status Recover(const std::string& why);
  // Creates the variables on every PS and restores the newest committed
  // checkpoint that every PS can restore whole, refusing (and reporting)
  // corrupt or missing ones and falling back to older ones.
  absl::StatusOr<CheckpointManifest> RestoreNewest();
  absl::Status WaitForAllPs(absl::Duration timeout);
  absl::Status Evaluate(int64_t step);
  void Report(bool force);
  int64_t MinStep() const;
  int NumPs() const { return static_cast<int>(ps_.size()); }
  int NumWorkers() const { return static_cast<int>(workers_.size()); }
  int ActiveWorkers() const;
  // Tells every PS how many workers a SYNC step waits for.
  absl::Status ResizeSyncGroup();
  bool Sync() const { return options_.job.consistency().mode() == ConsistencyDef::SYNC; }

  const CoordinatorOptions options_;
  TaskRegistry* const registry_;
  ChannelCache* const channels_;
  const Planner planner_;
  const Evaluator evaluator_;
  const std::function<void(const std::string&)> report_;
  ManifestStore manifests_;

  // Coordinator-thread state.
  JobPlan plan_;
  std::vector<PsView> ps_;
  std::vector<WorkerView> workers_;
  int64_t end_step_ = 0;
  int64_t generation_ = 0;
  int64_t last_checkpoint_step_ = -1;
  absl::Time last_checkpoint_time_;
  int64_t last_eval_step_ = 0;
  absl::Time start_time_;
  absl::Time last_report_ = absl::InfinitePast();
  JobSummary summary_;

  mutable absl::Mutex mu_;
  JobStatusResponse status_ ABSL_GUARDED_BY(mu_);
  std::vector<ReportFailureRequest> failure_reports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_CHIEF_COORDINATOR_H_
