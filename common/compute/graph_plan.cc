#include "common/compute/graph_plan.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/graph/graph_analysis.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<GraphPlan>> GraphPlan::Create(const GraphDef& graph) {
  auto p = std::unique_ptr<GraphPlan>(new GraphPlan());
  p->graph_ = graph;
  ASSIGN_OR_RETURN(p->shapes_, ValidateGraph(graph));
  ASSIGN_OR_RETURN(p->topo_, TopologicalOrder(graph));
  for (int i = 0; i < graph.node_size(); ++i) p->index_[graph.node(i).name()] = i;
  p->inputs_.resize(graph.node_size());
  for (int i = 0; i < graph.node_size(); ++i) {
    for (const std::string& in : graph.node(i).input()) {
      auto [node, k] = ParseTensorName(in);
      if (k >= 0) p->inputs_[i].emplace_back(p->index_[node], k);
    }
  }
  return p;
}

absl::StatusOr<const GraphPlan::Steps*> GraphPlan::For(const std::vector<std::string>& fetches) {
  std::string key = absl::StrJoin(fetches, ",");
  auto it = cache_.find(key);
  if (it != cache_.end()) return &it->second;
  Steps s;
  s.fetched.assign(graph_.node_size(), false);
  std::set<int> needed;
  std::vector<int> todo;
  for (const std::string& f : fetches) {
    auto [node, k] = ParseTensorName(f);
    auto idx = index_.find(node);
    if (idx == index_.end()) return absl::InvalidArgumentError(absl::StrCat("fetch \"", f, "\" names no node"));
    todo.push_back(idx->second);
    s.fetched[idx->second] = true;
    s.fetches.emplace_back(idx->second, k);
  }
  while (!todo.empty()) {
    int i = todo.back();
    todo.pop_back();
    if (!needed.insert(i).second) continue;
    for (auto [in, k] : inputs_[i]) todo.push_back(in);
  }
  s.uses.assign(graph_.node_size(), 0);
  for (int i : topo_) {
    if (!needed.count(i)) continue;
    s.order.push_back(i);
    for (auto [in, k] : inputs_[i]) ++s.uses[in];
  }
  return &cache_.emplace(key, std::move(s)).first->second;
}

absl::Status GraphPlan::GatherInputs(int i, const Values& values, std::vector<Tensor>* inputs) const {
  inputs->clear();
  for (auto [in, k] : inputs_[i]) {
    if (k >= static_cast<int>(values[in].size())) {
      return absl::InternalError(absl::StrCat("node ", graph_.node(i).name(), ": input ", in, ":", k, " missing"));
    }
    inputs->push_back(values[in][k]);
  }
  return absl::OkStatus();
}

void GraphPlan::ReleaseInputs(int i, const Steps& steps, std::vector<int>* uses, Values* values) const {
  for (auto [in, k] : inputs_[i]) {
    if (--(*uses)[in] == 0 && !steps.fetched[in]) (*values)[in].clear();  // last use: free
  }
}

absl::StatusOr<std::vector<Tensor>> GraphPlan::Fetched(const Steps& steps, const std::vector<std::string>& names,
                                                       const Values& values) const {
  std::vector<Tensor> out;
  for (size_t f = 0; f < steps.fetches.size(); ++f) {
    auto [node, k] = steps.fetches[f];
    const auto& v = values[node];
    if (k < 0 || k >= static_cast<int>(v.size())) {
      return absl::InvalidArgumentError(absl::StrCat("fetch ", names[f], ": no such output"));
    }
    out.push_back(v[k]);
  }
  return out;
}

}  // namespace psrt
