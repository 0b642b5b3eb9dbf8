// Executor: runs a graph on the CPU kernels, in topological order, freeing
// each tensor after its last use.
//
//   ASSIGN_OR_RETURN(auto exec, Executor::Create(graph, ExecutorOptions()));
//   ASSIGN_OR_RETURN(auto out, exec->Run({{"image", x}, {"dense/kernel", w}},
//                                        {"loss", "gradients/.../db"}, step, true));
//
// Feeds are by node name (Placeholder and Variable nodes); fetches are
// tensor names. Only the nodes the fetches need run. Run may be called from
// one thread at a time; the kernels use the executor's thread pool.
#ifndef PSRT_COMMON_COMPUTE_EXECUTOR_H_
#define PSRT_COMMON_COMPUTE_EXECUTOR_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph/op_registry.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"
#include "common/compute/graph_plan.h"
#include "common/compute/kernels/kernel.h"
#include "common/compute/step_executor.h"

namespace psrt {

struct ExecutorOptions {
  int threads = 0;  // 0 = one per core
};

class Executor : public StepExecutor {
 public:
  // Validates the graph (ops, inputs, cycles, shapes) and that every op has
  // a CPU kernel.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const GraphDef& graph,
                                                          ExecutorOptions options = {});
  ~Executor() override;

  absl::StatusOr<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& feeds,
                                          const std::vector<std::string>& fetches, uint64_t seed,
                                          bool training) override;
  // Hands each fetch to `ready` right after the node making it has run.
  absl::StatusOr<std::vector<Tensor>> RunStreaming(const std::map<std::string, Tensor>& feeds,
                                                   const std::vector<std::string>& fetches, uint64_t seed,
                                                   bool training, const FetchReady& ready) override;
  std::string device_name() const override { return "cpu"; }

  const GraphDef& graph() const { return plan_->graph(); }
  // Inferred shapes (-1 = known at run time only).
  const std::map<std::string, std::vector<Shape>>& shapes() const { return plan_->shapes(); }
  const Eigen::ThreadPoolDevice* device() const { return device_.get(); }

 private:
  Executor() = default;

  std::unique_ptr<GraphPlan> plan_;
  std::vector<const Kernel*> kernels_;
  std::unique_ptr<Eigen::ThreadPool> pool_;
  std::unique_ptr<Eigen::ThreadPoolDevice> device_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_EXECUTOR_H_
