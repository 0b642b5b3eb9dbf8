// From a job file to what runs: parsing the .pbtxt, planning (graph,
// gradients, pruning, placement) and evaluation on the test split. Shared
// by the chief and the in-process trainer.
#ifndef PSRT_COMMON_PLAN_JOB_PLANNER_H_
#define PSRT_COMMON_PLAN_JOB_PLANNER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/plan/job_plan.h"
#include "proto/job.pb.h"

namespace psrt {

// Bounds on a job, each checked before what it bounds is parsed or built:
// the file's size before it is read, the model's layers and graph nodes
// before anything is compiled. An error names the bound and the flag of
// the chief (and evaluator, export) that sets it.
struct JobLimits {
  int64_t max_file_bytes = int64_t{16} << 20;  // --max_job_file_mb
  int max_layers = 10000;                      // --max_model_layers
  int max_graph_nodes = 100000;                // --max_graph_nodes
};

// Parses a job in protobuf text format; errors give the file, line and
// column. Fills each input format's default features. LoadJob also takes
// a relative model.onnx.path from the job file's directory.
// INVALID_ARGUMENT for a job past `limits` (naming the bound and its flag).
absl::StatusOr<TrainingJob> LoadJob(const std::string& path, const JobLimits& limits = {});
absl::StatusOr<TrainingJob> ParseJob(const std::string& text, const std::string& source,
                                     const JobLimits& limits = {});

// The job's strategy against the cluster it runs on: the PS strategy needs
// PS tasks, a mirrored one has none (its workers hold the variables);
// replication factor 2 needs 2 PS and the PS strategy.
// INVALID_ARGUMENT naming the field.
// Also job.failure.max_workers: 0, or in [num_workers, kMaxElasticWorkers]
// and above num_workers only under the parameter-server strategy.
absl::Status CheckStrategy(const TrainingJob& job, int num_ps, int num_workers);
inline constexpr int kMaxElasticWorkers = 1024;
// multi_worker_mirrored, mirrored or central_storage: the workers hold the
// variables themselves.
bool IsMirrored(const TrainingJob& job);
// hybrid: dense variables mirrored on the workers, embeddings on the PS.
bool IsHybrid(const TrainingJob& job);
// Whether workers all-reduce gradients in a collective group (mirrored
// strategies and hybrid).
bool IsCollective(const TrainingJob& job);
// The collective deadline the job sets (0 = the default).
int CollectiveTimeoutMs(const TrainingJob& job);
// Copies of each PS shard the job keeps (job.replication.factor; 0 = 1).
int ReplicationFactor(const TrainingJob& job);
// Local device replicas per worker the strategy asks for (1 for the PS).
int LocalDevices(const TrainingJob& job);

// The Planner of chief/job_plan.h. The store index num_ps stands for the
// worker's own replica: a mirrored job's variables all go there ("PS 0" of
// no PS), whole; a hybrid job's dense ones too, its embeddings to the PS.
absl::StatusOr<JobPlan> PlanJob(const TrainingJob& job, int num_ps);

// A worker assignment of the plan (graph, placement, input, loss, metrics);
// the caller sets shard, steps and generation.
WorkerAssignment AssignmentOf(const TrainingJob& job, const JobPlan& plan);

// What a worker of the plan must receive in one message fits in
// `max_message_bytes` (its --max_receive_message_mb): the Start carrying
// AssignmentOf (with `slack` bytes for what the chief adds per worker), and
// under a mirrored strategy the CreateVariables of its replica (the initial
// values of an imported model's weights). RESOURCE_EXHAUSTED naming the
// message, its size and the flag otherwise, so that a job whose worker would
// refuse it stops before it starts.
absl::Status CheckWorkerMessageSizes(const TrainingJob& job, const JobPlan& plan, int num_ps, int64_t max_message_bytes,
                                     int64_t slack = int64_t{1} << 20);

// Evaluates on the job's test split (eval.max_examples, or all of it),
// averaging the loss and metrics over examples.
Evaluator MakeEvaluator(const TrainingJob& job, const JobPlan& plan, int threads = 0);

// Before training: the job's test split (input.test), if it has one, opens
// and its first batch reads as the evaluator will read it. Otherwise
// FAILED_PRECONDITION "input.test: the test split cannot be read: WHY", so a
// job does not train for hours to end with no final metric. OK for a job
// without a test split.
absl::Status CheckTestSplit(const TrainingJob& job);

}  // namespace psrt

#endif  // PSRT_COMMON_PLAN_JOB_PLANNER_H_
