// GPU kernels: the same contract as the CPU ones (kernel.h), but inputs and
// outputs are device tensors (see gpu_device.h) and the work is queued on
// the executor's stream.
//
// A GpuKernelContext is a KernelContext, so kernels that only look at
// shapes (Identity, Reshape, ReshapeLike) are the CPU ones, and errors are
// worded alike: "node <name> (<op>): ...".
#ifndef PSRT_WORKER_GPU_GPU_KERNEL_H_
#define PSRT_WORKER_GPU_GPU_KERNEL_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/gpu/gpu_device.h"
#include "worker/gpu/gpu_ops.h"
#include "common/compute/kernels/kernel.h"

namespace psrt {
namespace gpu {

struct GpuKernelContext : KernelContext {
  GpuDevice* gpu = nullptr;
  // Where kernels report bad ids and labels found on the device; the
  // executor reads it after the step (see ErrorSlot in gpu_ops.h).
  ErrorSlot error_slot{nullptr, 0};

  void* stream() const { return gpu->stream(); }
  absl::StatusOr<Tensor> Output(TensorShape shape, DataType dtype = DT_FLOAT) const;
  // OK for nullptr, else an internal error naming the node and the CUDA error.
  absl::Status Check(GpuError e) const;
};

using GpuKernel = std::function<absl::Status(GpuKernelContext&)>;

class GpuKernelRegistry : public KernelTable<GpuKernel> {
 public:
  static const GpuKernelRegistry& Get();
};

void RegisterGpuBasicKernels(GpuKernelRegistry* r);
void RegisterGpuNnKernels(GpuKernelRegistry* r);
void RegisterGpuMathKernels(GpuKernelRegistry* r);

}  // namespace gpu
}  // namespace psrt

#define PSRT_GPU_CHECK(ctx, expr) RETURN_IF_ERROR((ctx).Check(expr))

#endif  // PSRT_WORKER_GPU_GPU_KERNEL_H_
