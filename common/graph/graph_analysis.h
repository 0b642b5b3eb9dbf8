// Checking, ordering, pruning and differentiating graphs.
//
// Every error names the node at fault: an unknown op, a dangling or
// out-of-range input, a cycle, a shape mismatch.
#ifndef PSRT_COMMON_GRAPH_GRAPH_ANALYSIS_H_
#define PSRT_COMMON_GRAPH_GRAPH_ANALYSIS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph/op_registry.h"
#include "proto/graph.pb.h"

namespace psrt {

// Node indices such that every node comes after its inputs.
absl::StatusOr<std::vector<int>> TopologicalOrder(const GraphDef& graph);

// Checks the structure and infers every output's shape (node -> shapes).
absl::StatusOr<std::map<std::string, std::vector<Shape>>> ValidateGraph(const GraphDef& graph);

// The subgraph the fetches need (reverse reachability over inputs),
// in the original order.
absl::StatusOr<GraphDef> Prune(const GraphDef& graph, const std::vector<std::string>& fetches);

// Appends the gradient of the scalar `loss` with respect to each variable
// (a Variable node's name); returns variable -> gradient tensor. A variable
// the loss does not depend on is an error naming it.
absl::StatusOr<std::map<std::string, std::string>> AddGradients(
    GraphDef* graph, const std::string& loss, const std::vector<std::string>& variables);

}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_GRAPH_ANALYSIS_H_
