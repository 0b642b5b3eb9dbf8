#include "worker/executor.h"

#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/graph/graph_analysis.h"
#include "common/status_macros.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const GraphDef& graph,
                                                           ExecutorOptions options) {
  auto e = std::unique_ptr<Executor>(new Executor());
  e->graph_ = graph;
  ASSIGN_OR_RETURN(e->shapes_, ValidateGraph(graph));
  ASSIGN_OR_RETURN(e->topo_, TopologicalOrder(graph));
  const KernelRegistry& kernels = KernelRegistry::Cpu();
  for (int i = 0; i < graph.node_size(); ++i) e->index_[graph.node(i).name()] = i;
  e->inputs_.resize(graph.node_size());
  e->kernels_.resize(graph.node_size(), nullptr);
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeDef& n = graph.node(i);
    for (const std::string& in : n.input()) {
      auto [node, k] = ParseTensorName(in);
      if (k >= 0) e->inputs_[i].emplace_back(e->index_[node], k);
    }
    if (n.op() == "Placeholder" || n.op() == "Variable") continue;
    e->kernels_[i] = kernels.Find(n.op());
    if (e->kernels_[i] == nullptr) {
      return absl::UnimplementedError(absl::StrCat("node ", n.name(), ": no CPU kernel for op ", n.op()));
    }
  }
  int threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  e->pool_ = std::make_unique<Eigen::ThreadPool>(threads);
  e->device_ = std::make_unique<Eigen::ThreadPoolDevice>(e->pool_.get(), threads);
  return e;
}

Executor::~Executor() {
  device_.reset();
  pool_.reset();
}

absl::StatusOr<const Executor::Plan*> Executor::PlanFor(const std::vector<std::string>& fetches) {
  std::string key = absl::StrJoin(fetches, ",");
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  std::set<int> needed;
  std::vector<int> todo;
  for (const std::string& f : fetches) {
    auto [node, k] = ParseTensorName(f);
    auto idx = index_.find(node);
    if (idx == index_.end()) return absl::InvalidArgumentError(absl::StrCat("fetch \"", f, "\" names no node"));
    todo.push_back(idx->second);
  }
  while (!todo.empty()) {
    int i = todo.back();
    todo.pop_back();
    if (!needed.insert(i).second) continue;
    for (auto [in, k] : inputs_[i]) todo.push_back(in);
  }
  Plan p;
  p.uses.assign(graph_.node_size(), 0);
  for (int i : topo_) {
    if (!needed.count(i)) continue;
    p.order.push_back(i);
    for (auto [in, k] : inputs_[i]) ++p.uses[in];
  }
  return &plans_.emplace(key, std::move(p)).first->second;
}

absl::StatusOr<std::vector<Tensor>> Executor::Run(const std::map<std::string, Tensor>& feeds,
                                                  const std::vector<std::string>& fetches,
                                                  uint64_t seed, bool training) {
  ASSIGN_OR_RETURN(const Plan* plan, PlanFor(fetches));
  std::vector<std::vector<Tensor>> values(graph_.node_size());
  std::vector<int> uses = plan->uses;
  std::set<int> fetched;
  for (const std::string& f : fetches) fetched.insert(index_[ParseTensorName(f).first]);
  KernelContext ctx;
  ctx.device = device_.get();
  ctx.training = training;
  ctx.seed = seed;
  for (int i : plan->order) {
    const NodeDef& n = graph_.node(i);
    if (kernels_[i] == nullptr) {  // Placeholder / Variable
      auto f = feeds.find(n.name());
      if (f == feeds.end()) {
        return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), " (", n.op(), ") was not fed"));
      }
      values[i] = {f->second};
      continue;
    }
    ctx.node = &n;
    ctx.inputs.clear();
    for (auto [in, k] : inputs_[i]) {
      if (k >= static_cast<int>(values[in].size())) {
        return absl::InternalError(absl::StrCat("node ", n.name(), ": input ", in, ":", k, " missing"));
      }
      ctx.inputs.push_back(values[in][k]);
    }
    ctx.outputs.clear();
    RETURN_IF_ERROR((*kernels_[i])(ctx));
    values[i] = std::move(ctx.outputs);
    ctx.inputs.clear();
    for (auto [in, k] : inputs_[i]) {
      if (--uses[in] == 0 && !fetched.count(in)) values[in].clear();  // last use: free
    }
  }
  std::vector<Tensor> out;
  for (const std::string& f : fetches) {
    auto [node, k] = ParseTensorName(f);
    const auto& v = values[index_[node]];
    if (k < 0 || k >= static_cast<int>(v.size())) return absl::InvalidArgumentError(absl::StrCat("fetch ", f, ": no such output"));
    out.push_back(v[k]);
  }
  return out;
}

}  // namespace psrt
