#include "common/compute/executor.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const GraphDef& graph,
                                                           ExecutorOptions options) {
  auto e = std::unique_ptr<Executor>(new Executor());
  ASSIGN_OR_RETURN(e->plan_, GraphPlan::Create(graph));
  const KernelRegistry& kernels = KernelRegistry::Cpu();
  e->kernels_.resize(graph.node_size(), nullptr);
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeDef& n = graph.node(i);
    if (GraphPlan::IsFed(n)) continue;
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

absl::StatusOr<std::vector<Tensor>> Executor::Run(const std::map<std::string, Tensor>& feeds,
                                                  const std::vector<std::string>& fetches,
                                                  uint64_t seed, bool training) {
  return RunStreaming(feeds, fetches, seed, training, nullptr);
}

absl::StatusOr<std::vector<Tensor>> Executor::RunStreaming(const std::map<std::string, Tensor>& feeds,
                                                           const std::vector<std::string>& fetches,
                                                           uint64_t seed, bool training,
                                                           const FetchReady& ready) {
  ASSIGN_OR_RETURN(const GraphPlan::Steps* steps, plan_->For(fetches));
  const GraphDef& graph = plan_->graph();
  GraphPlan::Values values(graph.node_size());
  // Per node: the fetches it makes, handed to `ready` once it has run.
  std::vector<std::vector<size_t>> fetched_by;
  if (ready) {
    fetched_by.resize(graph.node_size());
    for (size_t f = 0; f < steps->fetches.size(); ++f) fetched_by[steps->fetches[f].first].push_back(f);
  }
  auto hand_over = [&](int i) -> absl::Status {
    if (!ready) return absl::OkStatus();
    for (size_t f : fetched_by[i]) {
      const int output = steps->fetches[f].second;
      if (output < 0 || output >= static_cast<int>(values[i].size())) {
        return absl::InvalidArgumentError(absl::StrCat("fetch ", fetches[f], ": no such output"));
      }
      ready(f, values[i][output]);
    }
    return absl::OkStatus();
  };
  std::vector<int> uses = steps->uses;
  KernelContext ctx;
  ctx.device = device_.get();
  ctx.training = training;
  ctx.seed = seed;
  for (int i : steps->order) {
    const NodeDef& n = graph.node(i);
    if (kernels_[i] == nullptr) {  // Placeholder / Variable
      auto f = feeds.find(n.name());
      if (f == feeds.end()) {
        return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), " (", n.op(), ") was not fed"));
      }
      values[i] = {f->second};
      RETURN_IF_ERROR(hand_over(i));
      continue;
    }
    ctx.node = &n;
    RETURN_IF_ERROR(plan_->GatherInputs(i, values, &ctx.inputs));
    ctx.outputs.clear();
    RETURN_IF_ERROR((*kernels_[i])(ctx));
    values[i] = std::move(ctx.outputs);
    ctx.inputs.clear();
    RETURN_IF_ERROR(hand_over(i));
    plan_->ReleaseInputs(i, *steps, &uses, &values);
  }
  return plan_->Fetched(*steps, fetches, values);
}

}  // namespace psrt
