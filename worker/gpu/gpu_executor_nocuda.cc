// Built without --config=cuda: there is no GPU executor to create.
#include "worker/gpu/gpu_executor.h"

namespace psrt {

struct GpuExecutor::Impl {};

GpuExecutor::GpuExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuExecutor::~GpuExecutor() = default;

absl::StatusOr<std::unique_ptr<GpuExecutor>> GpuExecutor::Create(const GraphDef&, int) {
  return absl::FailedPreconditionError("built without CUDA (build with --config=cuda)");
}

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Run(const std::map<std::string, Tensor>&,
                                                     const std::vector<std::string>&, uint64_t, bool) {
  return absl::FailedPreconditionError("built without CUDA (build with --config=cuda)");
}

absl::StatusOr<std::vector<std::string>> GpuExecutor::OpsWithoutKernel() {
  return absl::FailedPreconditionError("built without CUDA (build with --config=cuda)");
}

std::string GpuExecutor::device_name() const { return "gpu (not built)"; }
gpu::PoolStats GpuExecutor::pool_stats() const { return {}; }

}  // namespace psrt
