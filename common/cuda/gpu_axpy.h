// The smallest GPU kernel, y += a * x, with its CPU twin. It proves the
// CUDA build path end to end (nvcc genrule, cudart link, device probe,
// fallback without a driver); the graph kernels follow the same pattern.
//
// Plain pointers only: nvcc compiles the .cu against this header alone.
#ifndef PSRT_COMMON_CUDA_GPU_AXPY_H_
#define PSRT_COMMON_CUDA_GPU_AXPY_H_

#include <cstdint>
#include <string>

namespace psrt {
namespace cuda {

struct GpuProbe {
  bool available = false;
  int device_count = 0;
  std::string name;     // of device 0
  std::string why_not;  // when not available: no driver, no device, or built without CUDA
};

// Never fails: without CUDA support, a driver or a device it says why.
GpuProbe ProbeGpu();

// y[i] += a * x[i] on the host.
void AxpyCpu(float a, const float* x, float* y, int64_t n);

// The same on device 0: copies x and y over, runs the kernel, copies y back.
// Returns "" on success, else the CUDA error text.
std::string AxpyGpu(float a, const float* x, float* y, int64_t n);

}  // namespace cuda
}  // namespace psrt

#endif  // PSRT_COMMON_CUDA_GPU_AXPY_H_
