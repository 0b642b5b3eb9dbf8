// Broadcasting arithmetic, reductions and clip (one thread per output
// element over a coalesced walk, so any rank costs a few index divisions),
// and batch and layer normalisation.
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
    // kFirst never reads b: its strides may walk past b's end (BroadcastLike, BroadcastTo).
    out[i] = scale * (op == BroadcastOp::kFirst ? a[oa] : ApplyOp(op, a[oa], b[ob]));
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

// One thread per channel: adjacent threads read adjacent channels of a
// row, so the loads coalesce.
__global__ void BatchNormStatsKernel(const float* __restrict__ x, int64_t rows, int64_t ch, float* __restrict__ mean,
                                     float* __restrict__ var) {
  PSRT_GRID_LOOP(j, ch) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += x[r * ch + j];
    const double m = s / rows;
    double q = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const double d = x[r * ch + j] - m;
      q += d * d;
    }
    mean[j] = static_cast<float>(m);
    var[j] = static_cast<float>(q / rows);
  }
}

__global__ void BatchNormApplyKernel(const float* __restrict__ x, const float* __restrict__ scale,
                                     const float* __restrict__ offset, const float* __restrict__ mean,
                                     const float* __restrict__ var, float eps, int64_t n, int64_t ch,
                                     float* __restrict__ y) {
  PSRT_GRID_LOOP(i, n) {
    const int64_t j = i % ch;
    y[i] = (x[i] - mean[j]) * rsqrtf(var[j] + eps) * scale[j] + offset[j];
  }
}

__global__ void BatchNormGradSumsKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                        const float* __restrict__ mean, const float* __restrict__ var, float eps,
                                        int64_t rows, int64_t ch, float* __restrict__ dscale,
                                        float* __restrict__ doffset) {
  PSRT_GRID_LOOP(j, ch) {
    const float rstd = rsqrtf(var[j] + eps);
    double s = 0.0, dot = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = dy[r * ch + j];
      s += g;
      dot += static_cast<double>(g) * (x[r * ch + j] - mean[j]) * rstd;
    }
    doffset[j] = static_cast<float>(s);
    dscale[j] = static_cast<float>(dot);
  }
}

__global__ void BatchNormGradInputKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                         const float* __restrict__ scale, const float* __restrict__ mean,
                                         const float* __restrict__ var, const float* __restrict__ dscale,
                                         const float* __restrict__ doffset, float eps, int64_t rows, int64_t ch,
                                         float* __restrict__ dx) {
  PSRT_GRID_LOOP(i, rows * ch) {
    const int64_t j = i % ch;
    const float rstd = rsqrtf(var[j] + eps), xhat = (x[i] - mean[j]) * rstd;
    dx[i] = scale[j] * rstd * (dy[i] - (doffset[j] + xhat * dscale[j]) / static_cast<float>(rows));
  }
}

// Layer normalisation: one warp per row, as the softmax kernels
// (gpu_elementwise.cu). RowStats: the mean and rsqrt(biased var + eps) of
// the row x[0, d), in every lane.
__device__ inline void RowStats(const float* x, int64_t d, float eps, int lane, float* mean, float* rstd) {
  double s = 0.0;
  for (int64_t i = lane; i < d; i += kWarp) s += x[i];
  const double m = WarpSumD(s) / d;
  double q = 0.0;
  for (int64_t i = lane; i < d; i += kWarp) {
    const double t = x[i] - m;
    q += t * t;
  }
  *mean = static_cast<float>(m);
  *rstd = static_cast<float>(1.0 / sqrt(WarpSumD(q) / d + eps));
}

__global__ void LayerNormKernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float eps, int64_t rows, int64_t d,
                                float* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  PSRT_WARP_ROW_LOOP(r, rows) {
    const float* in = x + r * d;
    float mean, rstd;
    RowStats(in, d, eps, lane, &mean, &rstd);
    for (int64_t i = lane; i < d; i += kWarp) y[r * d + i] = (in[i] - mean) * rstd * gamma[i] + beta[i];
  }
}

// dx per row; the row's mean and rstd go to stats[2r], stats[2r + 1] for
// the column sums.
__global__ void LayerNormGradRowsKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                        const float* __restrict__ gamma, float eps, int64_t rows, int64_t d,
                                        float* __restrict__ stats, float* __restrict__ dx) {
  const int lane = threadIdx.x % kWarp;
  PSRT_WARP_ROW_LOOP(r, rows) {
    const float* in = x + r * d;
    const float* g = dy + r * d;
    float mean, rstd;
    RowStats(in, d, eps, lane, &mean, &rstd);
    double sg = 0.0, sgx = 0.0;
    for (int64_t i = lane; i < d; i += kWarp) {
      const float gi = g[i] * gamma[i];
      sg += gi;
      sgx += static_cast<double>(gi) * ((in[i] - mean) * rstd);
    }
    const float mg = static_cast<float>(WarpSumD(sg) / d), mgx = static_cast<float>(WarpSumD(sgx) / d);
    for (int64_t i = lane; i < d; i += kWarp) {
      const float xhat = (in[i] - mean) * rstd;
      dx[r * d + i] = rstd * (g[i] * gamma[i] - mg - xhat * mgx);
    }
    if (lane == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

// One thread per column, as BatchNormGradSumsKernel.
__global__ void LayerNormGradColumnsKernel(const float* __restrict__ dy, const float* __restrict__ x,
                                           const float* __restrict__ stats, int64_t rows, int64_t d,
                                           float* __restrict__ dgamma, float* __restrict__ dbeta) {
  PSRT_GRID_LOOP(j, d) {
    double s = 0.0, dot = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = dy[r * d + j];
      s += g;
      dot += static_cast<double>(g) * ((x[r * d + j] - stats[2 * r]) * stats[2 * r + 1]);
    }
    dbeta[j] = static_cast<float>(s);
    dgamma[j] = static_cast<float>(dot);
  }
}

}  // namespace

GpuError LayerNorm(void* stream, const float* d_x, const float* d_gamma, const float* d_beta, float eps,
                   int64_t rows, int64_t d, float* d_y) {
  if (rows * d == 0) return nullptr;
  LayerNormKernel<<<BlocksFor(rows * kWarp), kThreads, 0, S(stream)>>>(d_x, d_gamma, d_beta, eps, rows, d, d_y);
  return LaunchStatus();
}

GpuError LayerNormGrad(void* stream, const float* d_dy, const float* d_x, const float* d_gamma, float eps,
                       int64_t rows, int64_t d, float* d_stats, float* d_dx, float* d_dgamma, float* d_dbeta) {
  if (d == 0) return nullptr;
  if (rows > 0) {
    LayerNormGradRowsKernel<<<BlocksFor(rows * kWarp), kThreads, 0, S(stream)>>>(d_dy, d_x, d_gamma, eps, rows, d,
                                                                                d_stats, d_dx);
    if (GpuError e = LaunchStatus()) return e;
  }
  LayerNormGradColumnsKernel<<<BlocksFor(d), kThreads, 0, S(stream)>>>(d_dy, d_x, d_stats, rows, d, d_dgamma,
                                                                      d_dbeta);
  return LaunchStatus();
}

GpuError BatchNormStats(void* stream, const float* d_x, int64_t rows, int64_t ch, float* d_mean, float* d_var) {
  if (ch == 0) return nullptr;
  BatchNormStatsKernel<<<BlocksFor(ch), kThreads, 0, S(stream)>>>(d_x, rows, ch, d_mean, d_var);
  return LaunchStatus();
}

GpuError BatchNormApply(void* stream, const float* d_x, const float* d_scale, const float* d_offset,
                        const float* d_mean, const float* d_var, float eps, int64_t rows, int64_t ch, float* d_y) {
  if (rows * ch == 0) return nullptr;
  BatchNormApplyKernel<<<BlocksFor(rows * ch), kThreads, 0, S(stream)>>>(d_x, d_scale, d_offset, d_mean, d_var, eps,
                                                                        rows * ch, ch, d_y);
  return LaunchStatus();
}

GpuError BatchNormGradSums(void* stream, const float* d_dy, const float* d_x, const float* d_mean, const float* d_var,
                           float eps, int64_t rows, int64_t ch, float* d_dscale, float* d_doffset) {
  if (ch == 0) return nullptr;
  BatchNormGradSumsKernel<<<BlocksFor(ch), kThreads, 0, S(stream)>>>(d_dy, d_x, d_mean, d_var, eps, rows, ch,
                                                                    d_dscale, d_doffset);
  return LaunchStatus();
}

GpuError BatchNormGradInput(void* stream, const float* d_dy, const float* d_x, const float* d_scale,
                            const float* d_mean, const float* d_var, const float* d_dscale, const float* d_doffset,
                            float eps, int64_t rows, int64_t ch, float* d_dx) {
  if (rows * ch == 0) return nullptr;
  BatchNormGradInputKernel<<<BlocksFor(rows * ch), kThreads, 0, S(stream)>>>(d_dy, d_x, d_scale, d_mean, d_var,
                                                                            d_dscale, d_doffset, eps, rows, ch, d_dx);
  return LaunchStatus();
}

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
