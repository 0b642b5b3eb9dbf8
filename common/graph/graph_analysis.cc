#include "common/graph/graph_analysis.h"

#include <algorithm>
#include <deque>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/graph/shape_util.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

std::map<std::string, int> IndexByName(const GraphDef& g) {
  std::map<std::string, int> idx;
  for (int i = 0; i < g.node_size(); ++i) idx.emplace(g.node(i).name(), i);
  return idx;
}

absl::Status NodeError(const NodeDef& n, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), " (", n.op(), "): ", what));
}

}  // namespace

absl::StatusOr<std::vector<int>> TopologicalOrder(const GraphDef& g) {
  std::map<std::string, int> idx;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeDef& n = g.node(i);
    if (n.name().empty()) return absl::InvalidArgumentError(absl::StrCat("node #", i, " has no name"));
    if (!idx.emplace(n.name(), i).second) return NodeError(n, "duplicate node name");
  }
  std::vector<int> pending(g.node_size(), 0);
  std::vector<std::vector<int>> consumers(g.node_size());
  for (int i = 0; i < g.node_size(); ++i) {
    for (const std::string& in : g.node(i).input()) {
      auto [node, k] = ParseTensorName(in);
      auto it = idx.find(node);
      if (it == idx.end()) return NodeError(g.node(i), absl::StrCat("input \"", in, "\" names no node"));
      ++pending[i];
      consumers[it->second].push_back(i);
    }
  }
  std::deque<int> ready;
  for (int i = 0; i < g.node_size(); ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    int i = ready.front();
    ready.pop_front();
    order.push_back(i);
    for (int c : consumers[i]) {
      if (--pending[c] == 0) ready.push_back(c);
    }
  }
  if (static_cast<int>(order.size()) != g.node_size()) {
    std::vector<std::string> stuck;
    for (int i = 0; i < g.node_size(); ++i) {
      if (pending[i] > 0) stuck.push_back(g.node(i).name());
    }
    return absl::InvalidArgumentError(
        absl::StrCat("graph has a cycle through: ", absl::StrJoin(stuck, ", ")));
  }
  return order;
}

absl::StatusOr<std::map<std::string, std::vector<Shape>>> ValidateGraph(const GraphDef& g) {
  ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder(g));
  const OpRegistry& ops = OpRegistry::Global();
  std::map<std::string, std::vector<Shape>> shapes;
  for (int i : order) {
    const NodeDef& n = g.node(i);
    const OpDef* op = ops.Find(n.op());
    if (op == nullptr) return NodeError(n, "unknown op");
    std::vector<Shape> in;
    for (const std::string& name : n.input()) {
      auto [node, k] = ParseTensorName(name);
      if (k < 0) continue;  // control input
      const std::vector<Shape>& outs = shapes[node];
      if (k >= static_cast<int>(outs.size())) {
        return NodeError(n, absl::StrCat("input \"", name, "\": ", node, " has ", outs.size(), " outputs"));
      }
      in.push_back(outs[k]);
    }
    if (op->num_inputs >= 0 && static_cast<int>(in.size()) != op->num_inputs) {
      return NodeError(n, absl::StrCat("takes ", op->num_inputs, " inputs, has ", in.size()));
    }
    std::vector<Shape> out;
    RETURN_IF_ERROR(op->shape(n, in, &out));
    shapes[n.name()] = std::move(out);
  }
  return shapes;
}

absl::StatusOr<GraphDef> Prune(const GraphDef& g, const std::vector<std::string>& fetches) {
  std::map<std::string, int> idx = IndexByName(g);
  std::set<int> keep;
  std::deque<int> todo;
  for (const std::string& f : fetches) {
    auto it = idx.find(ParseTensorName(f).first);
    if (it == idx.end()) return absl::InvalidArgumentError(absl::StrCat("fetch \"", f, "\" names no node"));
    todo.push_back(it->second);
  }
  while (!todo.empty()) {
    int i = todo.front();
    todo.pop_front();
    if (!keep.insert(i).second) continue;
    for (const std::string& in : g.node(i).input()) {
      auto it = idx.find(ParseTensorName(in).first);
      if (it == idx.end()) return NodeError(g.node(i), absl::StrCat("input \"", in, "\" names no node"));
      todo.push_back(it->second);
    }
  }
  GraphDef out;
  out.set_version(g.version());
  for (int i : keep) *out.add_node() = g.node(i);
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> AddGradients(
    GraphDef* graph, const std::string& loss, const std::vector<std::string>& variables) {
  ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder(*graph));
  const int forward_nodes = graph->node_size();
  std::map<std::string, int> idx = IndexByName(*graph);
  auto loss_name = ParseTensorName(loss);
  if (!idx.count(loss_name.first)) return absl::InvalidArgumentError(absl::StrCat("loss \"", loss, "\" names no node"));

  // Only nodes on a path from a variable to the loss need gradients.
  std::set<int> from_vars;
  for (const std::string& v : variables) {
    auto it = idx.find(v);
    if (it == idx.end()) return absl::InvalidArgumentError(absl::StrCat("variable \"", v, "\" names no node"));
    from_vars.insert(it->second);
  }
  for (int i : order) {
    for (const std::string& in : graph->node(i).input()) {
      if (from_vars.count(idx[ParseTensorName(in).first])) from_vars.insert(i);
    }
  }
  std::set<int> to_loss = {idx[loss_name.first]};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!to_loss.count(*it)) continue;
    for (const std::string& in : graph->node(*it).input()) to_loss.insert(idx[ParseTensorName(in).first]);
  }

  GraphBuilder b(graph);
  // Gradient contributions per tensor ("node:k").
  std::map<std::string, std::vector<std::string>> contributions;
  Tensor one = Tensor::Scalar<float>(1.0f);
  contributions[TensorName(loss_name.first, loss_name.second)].push_back(
      b.Add("Const", "gradients/" + loss_name.first + "/seed", {}, {{"value", AttrTensor(one)}}));
  auto sum = [&](const std::string& tensor) -> std::string {
    auto it = contributions.find(tensor);
    if (it == contributions.end() || it->second.empty()) return "";
    if (it->second.size() == 1) return it->second[0];
    std::string s = b.Add("AddN", "gradients/" + ParseTensorName(tensor).first + "/sum", it->second);
    it->second = {s};
    return s;
  };

  const OpRegistry& ops = OpRegistry::Global();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    int i = *it;
    if (i >= forward_nodes || !from_vars.count(i) || !to_loss.count(i)) continue;
    const NodeDef node = graph->node(i);  // a copy: adding nodes may move it
    const OpDef* op = ops.Find(node.op());
    if (op == nullptr) return NodeError(node, "unknown op");
    if (node.op() == "Variable") continue;
    GradContext c{&node, {}, &b};
    bool any = false;
    for (int k = 0; k < op->num_outputs; ++k) {
      c.dy.push_back(sum(TensorName(node.name(), k)));
      any |= !c.dy.back().empty();
    }
    if (!any) continue;
    if (!op->grad) return NodeError(node, "has no gradient, but the loss depends on it through a variable");
    ASSIGN_OR_RETURN(std::vector<std::string> dx, op->grad(c));
    for (int k = 0; k < node.input_size() && k < static_cast<int>(dx.size()); ++k) {
      if (dx[k].empty()) continue;
      auto [in_node, in_k] = ParseTensorName(node.input(k));
      contributions[TensorName(in_node, in_k)].push_back(dx[k]);
    }
  }
  std::map<std::string, std::string> grads;
  for (const std::string& v : variables) {
    std::string g = sum(TensorName(v, 0));
    if (g.empty()) return absl::InvalidArgumentError(absl::StrCat("loss ", loss, " does not depend on variable ", v));
    grads[v] = g;
  }
  return grads;
}

}  // namespace psrt
