// GpuExecutor: runs a graph step on one GPU (GPU 0 unless told) with the CUDA kernels.
//
// Same contract as the CPU Executor (see step_executor.h). Every
// intermediate tensor stays in device memory: per step the feeds are copied
// to the device once and only the fetches come back. Device memory comes
// from a caching pool owned by the executor, so buffers freed after their
// last use are reused by later nodes and later steps; it is returned to
// CUDA when the executor is destroyed. Constants are uploaded once, at
// Create.
//
// Built without --config=cuda, Create fails saying so (the tests skip).
#ifndef PSRT_WORKER_GPU_GPU_EXECUTOR_H_
#define PSRT_WORKER_GPU_GPU_EXECUTOR_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"
#include "worker/gpu/caching_pool.h"
#include "common/compute/step_executor.h"

namespace psrt {

class GpuExecutor : public StepExecutor {
 public:
  // Fails without a CUDA build, driver or device, and when an op has no
  // GPU kernel (the error names the node and the op).
  // On GPU `ordinal` (OUT_OF_RANGE when there is no such GPU).
  static absl::StatusOr<std::unique_ptr<GpuExecutor>> Create(const GraphDef& graph, int ordinal = 0);
  ~GpuExecutor() override;

  // The graph ops (OpRegistry) with no GPU kernel, which should be none;
  // fails when built without CUDA. Needs no device.
  static absl::StatusOr<std::vector<std::string>> OpsWithoutKernel();

  absl::StatusOr<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& feeds,
                                          const std::vector<std::string>& fetches, uint64_t seed,
                                          bool training) override;
  std::string device_name() const override;
  // The device memory pool's counters: allocations stop after the first
  // steps when buffers are reused.
  gpu::PoolStats pool_stats() const;

 private:
  struct Impl;
  explicit GpuExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace psrt

#endif  // PSRT_WORKER_GPU_GPU_EXECUTOR_H_
