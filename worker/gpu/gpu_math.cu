// Broadcasting arithmetic, reductions and clip: one thread per output
// element over a coalesced walk, so any rank costs a few index divisions.
#include "worker/gpu/gpu_launch.h"
#include "worker/gpu/gpu_ops.h"

namespace psrt {
namespace gpu {
namespace {

__device__ inline float ApplyOp(BroadcastOp op, float a, float b) {
  switch (op) {
    case BroadcastOp::kAdd:
      return a + b;
    case BroadcastOp::kSub:
      return a - b;
    case BroadcastOp::kMul:
      return a * b;
    case BroadcastOp::kDiv:
      return a / b;
    default:
      return a;
  }
}

__global__ void BroadcastKernel(BroadcastOp op, BroadcastDims d, const float* __restrict__ a,
                                const float* __restrict__ b, float* __restrict__ out, int64_t n, float scale) {
  PSRT_GRID_LOOP(i, n) {
    int64_t rest = i, oa = 0, ob = 0;
    for (int k = d.rank - 1; k >= 0; --k) {
      const int64_t idx = rest % d.dims[k];
      rest /= d.dims[k];
      oa += idx * d.stride_a[k];
      ob += idx * d.stride_b[k];
    }
    out[i] = scale * ApplyOp(op, a[oa], b[ob]);
  }
}

// Output o: its kept-axis index picks a base; the loop walks the reduced
// axes' cells in order (per_out of them).
__global__ void ReduceKernel(ReduceDims d, const float* __restrict__ in, float* __restrict__ out, int64_t out_size,
                             int64_t per_out, float scale) {
  int64_t stride[kMaxBroadcastRank];
  int64_t s = 1;
  for (int k = d.rank - 1; k >= 0; --k) {
    stride[k] = s;
    s *= d.dims[k];
  }
  PSRT_GRID_LOOP(o, out_size) {
    int64_t rest = o, base = 0;
    for (int k = d.rank - 1; k >= 0; --k) {
      if (d.reduced[k]) continue;
      base += (rest % d.dims[k]) * stride[k];
      rest /= d.dims[k];
    }
    double sum = 0.0;
    for (int64_t j = 0; j < per_out; ++j) {
      int64_t r = j, off = base;
      for (int k = d.rank - 1; k >= 0; --k) {
        if (!d.reduced[k]) continue;
        off += (r % d.dims[k]) * stride[k];
        r /= d.dims[k];
      }
      sum += in[off];
    }
    out[o] = static_cast<float>(sum) * scale;
  }
}

__global__ void ClipKernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float lo, float hi) {
  PSRT_GRID_LOOP(i, n) { y[i] = fminf(fmaxf(x[i], lo), hi); }
}

__global__ void ClipGradKernel(const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ dx,
                               int64_t n, float lo, float hi) {
  PSRT_GRID_LOOP(i, n) { dx[i] = x[i] > lo && x[i] < hi ? dy[i] : 0.0f; }
}

}  // namespace

GpuError Broadcast(void* stream, BroadcastOp op, const BroadcastDims& d, const float* d_a, const float* d_b,
                   float* d_out, int64_t n, float scale) {
  if (d.rank < 0 || d.rank > kMaxBroadcastRank) return "broadcast rank out of range";
  if (n == 0) return nullptr;
  BroadcastKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(op, d, d_a, d_b, d_out, n, scale);
  return LaunchStatus();
}

GpuError Reduce(void* stream, const ReduceDims& d, const float* d_in, float* d_out, int64_t out_size, float scale) {
  if (d.rank < 0 || d.rank > kMaxBroadcastRank) return "reduction rank out of range";
  if (out_size == 0) return nullptr;
  int64_t in_size = 1;
  for (int k = 0; k < d.rank; ++k) in_size *= d.dims[k];
  if (in_size == 0) return Zero(stream, d_out, sizeof(float) * out_size);
  ReduceKernel<<<BlocksFor(out_size), kThreads, 0, S(stream)>>>(d, d_in, d_out, out_size, in_size / out_size, scale);
  return LaunchStatus();
}

GpuError Clip(void* stream, const float* d_x, float* d_y, int64_t n, float lo, float hi) {
  if (n == 0) return nullptr;
  ClipKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_x, d_y, n, lo, hi);
  return LaunchStatus();
}

GpuError ClipGrad(void* stream, const float* d_dy, const float* d_x, float* d_dx, int64_t n, float lo, float hi) {
  if (n == 0) return nullptr;
  ClipGradKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_dy, d_x, d_dx, n, lo, hi);
  return LaunchStatus();
}

}  // namespace gpu
}  // namespace psrt
