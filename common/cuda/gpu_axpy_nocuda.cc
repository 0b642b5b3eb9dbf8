// Built without --config=cuda: the CPU twin, and a probe that says why.
#include <cmath>

#include "common/cuda/gpu_axpy.h"

namespace psrt {
namespace cuda {

GpuProbe ProbeGpu() {
  GpuProbe p;
  p.why_not = "built without CUDA (build with --config=cuda)";
  return p;
}

void AxpyCpu(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

std::string AxpyGpu(float, const float*, float*, int64_t) {
  return "built without CUDA (build with --config=cuda)";
}

}  // namespace cuda
}  // namespace psrt
