// What the chief makes of a job before training starts: the compute graph
// each worker runs, the variables it reads, and where they live.
#ifndef PSRT_COMMON_PLAN_JOB_PLAN_H_
#define PSRT_COMMON_PLAN_JOB_PLAN_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"
#include "proto/job.pb.h"
#include "proto/worker_service.pb.h"

namespace psrt {

struct JobPlan {
  GraphDef graph;  // pruned: loss, gradients, metrics
  std::string loss_node;
  std::map<std::string, std::string> gradient_node;  // variable -> node
  std::vector<std::string> metric_nodes;
  PlacementMap placement;  // every variable, whole or by row shards
};

// Builds the plan of `job` for `num_ps` parameter servers (the graph
// library: layers -> graph, gradients, pruning, placement).
using Planner = std::function<absl::StatusOr<JobPlan>(const TrainingJob& job, int num_ps)>;

// Rows of a table by id, [n, dim], without making any (a hash table's
// evaluation: its rows are never pulled whole).
using RowReader = std::function<absl::StatusOr<Tensor>(const std::string& table, const Tensor& ids)>;

// Metrics of the model on the job's test split, given every variable whole
// but hash tables, whose rows `rows` reads as the batches need them (may be
// null when the model has none).
using Evaluator = std::function<absl::StatusOr<std::map<std::string, float>>(
    const std::map<std::string, Tensor>& variables, const RowReader& rows)>;

}  // namespace psrt

#endif  // PSRT_COMMON_PLAN_JOB_PLAN_H_
