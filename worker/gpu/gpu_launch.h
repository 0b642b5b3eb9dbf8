// Helpers shared by the .cu files (CUDA syntax: include from .cu only).
#ifndef PSRT_WORKER_GPU_GPU_LAUNCH_H_
#define PSRT_WORKER_GPU_GPU_LAUNCH_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "worker/gpu/gpu_ops.h"

namespace psrt {
namespace gpu {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

// Blocks for a grid-stride loop over n items: enough to fill the device,
// capped because every kernel loops over whatever the grid does not cover.
inline int BlocksFor(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(b, 8192)));
}

inline cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

// The launch's own error (bad configuration, no device); errors while the
// kernel runs show at the next synchronisation.
inline GpuError LaunchStatus() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

__device__ inline int64_t GlobalIndex() { return blockIdx.x * int64_t{blockDim.x} + threadIdx.x; }
__device__ inline int64_t GridStride() { return int64_t{blockDim.x} * gridDim.x; }

#define PSRT_GRID_LOOP(i, n) for (int64_t i = GlobalIndex(); i < (n); i += GridStride())
// One warp per row r: the bound is the same for all lanes of a warp, so the
// whole warp takes part in every shuffle in the body.
#define PSRT_WARP_ROW_LOOP(r, rows) \
  for (int64_t r = GlobalIndex() / kWarp; r < (rows); r += GridStride() / kWarp)

__device__ inline void RecordError(ErrorSlot err) {
  if (err.d_error != nullptr) atomicCAS(err.d_error, 0, err.code);
}

__device__ inline double LabelAt(Labels l, int64_t i) {
  return l.is_int64 ? static_cast<double>(static_cast<const int64_t*>(l.d_data)[i])
                    : static_cast<double>(static_cast<const float*>(l.d_data)[i]);
}

__device__ inline float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline double WarpSumD(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of one double per thread over a whole block (blockDim.x a multiple
// of 32, at most 1024); the result is valid in thread 0.
__device__ inline double BlockSum(double v) {
  __shared__ double partial[32];
  v = WarpSumD(v);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / kWarp ? partial[lane] : 0.0;
  if (warp == 0) v = WarpSumD(v);
  return v;
}

}  // namespace gpu
}  // namespace psrt

#endif  // PSRT_WORKER_GPU_GPU_LAUNCH_H_
