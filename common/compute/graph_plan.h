// GraphPlan: the part of running a graph that does not depend on the
// device, shared by the CPU Executor and the GpuExecutor: the validated
// graph, each node's inputs, and per fetch list the nodes to run (in
// topological order) with how many of them read each node, so a tensor is
// freed after its last use.
#ifndef PSRT_COMMON_COMPUTE_GRAPH_PLAN_H_
#define PSRT_COMMON_COMPUTE_GRAPH_PLAN_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph/op_registry.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"

namespace psrt {

class GraphPlan {
 public:
  struct Steps {
    std::vector<int> order;                   // nodes to run
    std::vector<int> uses;                    // consumers per node among them
    std::vector<bool> fetched;                // per node: kept to the end
    std::vector<std::pair<int, int>> fetches;  // (node, output) per fetch
  };
  // Each node's outputs while a step runs.
  using Values = std::vector<std::vector<Tensor>>;

  // Validates the graph (ops, inputs, cycles, shapes).
  static absl::StatusOr<std::unique_ptr<GraphPlan>> Create(const GraphDef& graph);

  // Cached per fetch list. Not thread-safe (Run is one thread at a time).
  absl::StatusOr<const Steps*> For(const std::vector<std::string>& fetches);

  // Placeholder and Variable nodes are fed, not run.
  static bool IsFed(const NodeDef& n) { return n.op() == "Placeholder" || n.op() == "Variable"; }

  // Node i's input tensors from `values`.
  absl::Status GatherInputs(int i, const Values& values, std::vector<Tensor>* inputs) const;
  // After node i ran: drops the tensors whose last consumer it was.
  void ReleaseInputs(int i, const Steps& steps, std::vector<int>* uses, Values* values) const;
  // The fetched tensors, in fetch order.
  absl::StatusOr<std::vector<Tensor>> Fetched(const Steps& steps, const std::vector<std::string>& names,
                                              const Values& values) const;

  const GraphDef& graph() const { return graph_; }
  const std::map<std::string, std::vector<Shape>>& shapes() const { return shapes_; }

 private:
  GraphPlan() = default;

  GraphDef graph_;
  std::map<std::string, int> index_;
  std::vector<std::vector<std::pair<int, int>>> inputs_;  // (node, output) per input
  std::vector<int> topo_;
  std::map<std::string, std::vector<Shape>> shapes_;
  std::map<std::string, Steps> cache_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_GRAPH_PLAN_H_
