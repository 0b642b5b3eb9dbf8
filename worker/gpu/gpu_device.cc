#include "worker/gpu/gpu_device.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psrt {
namespace gpu {

absl::Status ToStatus(GpuError e, absl::string_view what) {
  if (e == nullptr) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", e));
}

void* GpuDevice::Allocator::Allocate(size_t bytes, std::string* error) {
  void* p = nullptr;
  if (GpuError e = DeviceAlloc(&p, bytes)) {
    *error = absl::StrCat("cudaMalloc(", bytes, "): ", e);
    return nullptr;
  }
  return p;
}

void GpuDevice::Allocator::Free(void* p) {
  if (GpuError e = DeviceFree(p)) LOG(WARNING) << "cudaFree: " << e;
}

absl::StatusOr<std::unique_ptr<GpuDevice>> GpuDevice::Create(int ordinal) {
  auto d = std::unique_ptr<GpuDevice>(new GpuDevice());
  d->ordinal_ = ordinal;
  if (GpuError e = CreateStream(&d->stream_, &d->blas_, ordinal)) {
    return ToStatus(e, absl::StrCat("creating the CUDA stream and cuBLAS handle on GPU ", ordinal));
  }
  d->pool_ = std::make_shared<Pool>();
  return d;
}

absl::Status GpuDevice::Activate() const { return ToStatus(SetDevice(ordinal_), absl::StrCat("cudaSetDevice(", ordinal_, ")")); }

GpuDevice::~GpuDevice() {
  if (GpuError e = SetDevice(ordinal_)) LOG(WARNING) << "cudaSetDevice(" << ordinal_ << "): " << e;
  if (GpuError e = DestroyStream(stream_, blas_)) LOG(WARNING) << "releasing the CUDA stream: " << e;
  pool_->Trim();
}

absl::StatusOr<Tensor> GpuDevice::Allocate(DataType dtype, TensorShape shape) {
  const size_t bytes = static_cast<size_t>(shape.num_elements()) * DataTypeSize(dtype);
  size_t block = 0;
  std::string error;
  void* p = pool_->Allocate(bytes, &block, &error);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("GPU memory for ", DataTypeName(dtype), shape.ToString(), ": ", error));
  }
  std::shared_ptr<Pool> pool = pool_;
  auto buffer = std::make_shared<TensorBuffer>(p, bytes, [pool, block](void* q) { pool->Release(q, block); });
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

absl::StatusOr<Tensor> GpuDevice::Upload(const Tensor& host) {
  absl::StatusOr<Tensor> t = Allocate(host.dtype(), host.shape());
  if (!t.ok()) return t.status();
  PSRT_GPU_RETURN_IF_ERROR(CopyToDevice(stream_, t->raw_data(), host.raw_data(), host.TotalBytes()), "copy to the GPU");
  return t;
}

absl::StatusOr<Tensor> GpuDevice::Download(const Tensor& device_tensor) {
  Tensor host(device_tensor.dtype(), device_tensor.shape());
  PSRT_GPU_RETURN_IF_ERROR(CopyToHost(stream_, host.raw_data(), device_tensor.raw_data(), host.TotalBytes()),
                   "copy from the GPU");
  return host;
}

}  // namespace gpu
}  // namespace psrt
