// GpuDevice: one executor's stream, cuBLAS handle and memory pool on GPU 0.
//
// Device tensors are ordinary psrt::Tensors whose buffer holds device
// memory: shapes, dtypes, Reshape and sharing work as on the host, but
// data<T>() is a device pointer that host code must never dereference.
// When the last reference goes, the buffer returns to the pool, not to
// cudaFree (see caching_pool.h), so steady-state steps allocate nothing.
#ifndef PSRT_WORKER_GPU_GPU_DEVICE_H_
#define PSRT_WORKER_GPU_GPU_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "worker/gpu/caching_pool.h"
#include "worker/gpu/gpu_ops.h"

namespace psrt {
namespace gpu {

// InternalError("<what>: <CUDA error>"), or OK for nullptr.
absl::Status ToStatus(GpuError e, absl::string_view what);

#define PSRT_GPU_RETURN_IF_ERROR(expr, what)                                  \
  do {                                                                        \
    if (::psrt::gpu::GpuError psrt_gpu_e_ = (expr)) {                         \
      return ::psrt::gpu::ToStatus(psrt_gpu_e_, what);                        \
    }                                                                         \
  } while (0)

class GpuDevice {
 public:
  // On GPU `ordinal` (0 = the first).
  static absl::StatusOr<std::unique_ptr<GpuDevice>> Create(int ordinal = 0);
  // Waits for queued work, then frees the cached memory and the stream.
  ~GpuDevice();
  GpuDevice(const GpuDevice&) = delete;
  GpuDevice& operator=(const GpuDevice&) = delete;

  // Uninitialised device memory from the pool.
  absl::StatusOr<Tensor> Allocate(DataType dtype, TensorShape shape);
  // Host -> device (queued on the stream) and device -> host (waits).
  absl::StatusOr<Tensor> Upload(const Tensor& host);
  absl::StatusOr<Tensor> Download(const Tensor& device_tensor);

  // Makes this GPU the calling thread's current device: every thread that
  // runs work here calls it first (mirrored devices run on fresh threads).
  absl::Status Activate() const;
  int ordinal() const { return ordinal_; }
  void* stream() const { return stream_; }
  void* blas() const { return blas_; }
  PoolStats pool_stats() const { return pool_->stats(); }

 private:
  struct Allocator {
    void* Allocate(size_t bytes, std::string* error);
    void Free(void* p);
  };
  using Pool = CachingPool<Allocator>;
  GpuDevice() = default;

  int ordinal_ = 0;
  void* stream_ = nullptr;
  void* blas_ = nullptr;
  // Shared with every buffer's releaser, so a tensor that outlives its
  // device still has a pool to return to.
  std::shared_ptr<Pool> pool_;
};

}  // namespace gpu
}  // namespace psrt

#endif  // PSRT_WORKER_GPU_GPU_DEVICE_H_
