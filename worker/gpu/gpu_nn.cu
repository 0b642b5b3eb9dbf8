// Convolution (im2col / col2im around cuBLAS), max pooling, embeddings,
// losses and accuracy.
#include "worker/gpu/gpu_launch.h"
#include "worker/gpu/gpu_ops.h"

namespace psrt {
namespace gpu {
namespace {

// One thread per col entry; (r, p) = (output position, patch offset), the
// patch laid out [group, kh, kw, c / group] as on the CPU.
__global__ void Im2ColKernel(ConvDims g, const float* __restrict__ x, float* __restrict__ col) {
  const int64_t cg = g.c / g.group, patch = g.kh * g.kw * g.c, total = g.n * g.oh * g.ow * patch;
  PSRT_GRID_LOOP(i, total) {
    const int64_t r = i / patch, p = i % patch;
    const int64_t n = r / (g.oh * g.ow), rem = r % (g.oh * g.ow), oh = rem / g.ow, ow = rem % g.ow;
    const int64_t grp = p / (g.kh * g.kw * cg), kh = (p / (g.kw * cg)) % g.kh, kw = (p / cg) % g.kw, ch = p % cg;
    const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh, iw = ow * g.sw - g.pad_left + kw * g.dw;
    col[i] = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w ? x[((n * g.h + ih) * g.w + iw) * g.c + grp * cg + ch] : 0.0f;
  }
}

// One thread per input entry sums the col entries that read it: output
// position (oh, ow) reads row ih through kernel row kh when
// ih + pad - kh * dilation = oh * stride.
__global__ void Col2ImKernel(ConvDims g, const float* __restrict__ col, float* __restrict__ dx) {
  const int64_t cg = g.c / g.group, patch = g.kh * g.kw * g.c, total = g.n * g.h * g.w * g.c;
  PSRT_GRID_LOOP(i, total) {
    const int64_t ch = i % g.c, iw = (i / g.c) % g.w, ih = (i / (g.c * g.w)) % g.h, n = i / (g.c * g.w * g.h);
    const int64_t grp = ch / cg, cc = ch % cg;
    float s = 0.0f;
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t th = ih + g.pad_top - kh * g.dh;
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.oh) continue;
      const int64_t oh = th / g.sh;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t tw = iw + g.pad_left - kw * g.dw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.ow) continue;
        const int64_t r = (n * g.oh + oh) * g.ow + tw / g.sw;
        s += col[r * patch + ((grp * g.kh + kh) * g.kw + kw) * cg + cc];
      }
    }
    dx[i] = s;
  }
}

// The input offset of the window's first maximum, scanning as the CPU
// kernel does (so ties pick the same element); -1 for an empty window.
__device__ int64_t PoolArgmax(const ConvDims& g, const float* x, int64_t out_index) {
  const int64_t ch = out_index % g.c, r = out_index / g.c;
  const int64_t n = r / (g.oh * g.ow), rem = r % (g.oh * g.ow), oh = rem / g.ow, ow = rem % g.ow;
  float best = -INFINITY;
  int64_t at = -1;
  for (int64_t kh = 0; kh < g.kh; ++kh) {
    const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t kw = 0; kw < g.kw; ++kw) {
      const int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
      if (iw < 0 || iw >= g.w) continue;
      const int64_t o = ((n * g.h + ih) * g.w + iw) * g.c + ch;
      if (at < 0 || x[o] > best) {
        best = x[o];
        at = o;
      }
    }
  }
  return at;
}

// The on-image span [lo, hi) of output o's window along one axis and its
// divisor, as AvgAxis in the CPU kernels.
__device__ inline void AvgSpan(int64_t o, int64_t s, int64_t pad_before, int64_t k, int64_t in, int64_t pad_after,
                               bool include_pad, int64_t* lo, int64_t* hi, int64_t* count) {
  const int64_t start = o * s - pad_before, end = start + k;
  *lo = start > 0 ? start : 0;
  *hi = end < in ? end : in;
  const int64_t padded_end = end < in + pad_after ? end : in + pad_after;
  *count = include_pad ? padded_end - start : *hi - *lo;
}

__global__ void AvgPoolKernel(ConvDims g, const float* __restrict__ x, float* __restrict__ y) {
  PSRT_GRID_LOOP(i, g.n * g.oh * g.ow * g.c) {
    const int64_t ch = i % g.c, r = i / g.c;
    const int64_t n = r / (g.oh * g.ow), rem = r % (g.oh * g.ow), oh = rem / g.ow, ow = rem % g.ow;
    int64_t h0, h1, ch_count, w0, w1, cw_count;
    AvgSpan(oh, g.sh, g.pad_top, g.kh, g.h, g.pad_bottom, g.count_include_pad, &h0, &h1, &ch_count);
    AvgSpan(ow, g.sw, g.pad_left, g.kw, g.w, g.pad_right, g.count_include_pad, &w0, &w1, &cw_count);
    float s = 0.0f;
    for (int64_t ih = h0; ih < h1; ++ih) {
      for (int64_t iw = w0; iw < w1; ++iw) s += x[((n * g.h + ih) * g.w + iw) * g.c + ch];
    }
    const int64_t count = ch_count * cw_count;
    y[i] = count > 0 ? s / static_cast<float>(count) : 0.0f;
  }
}

// One thread per input entry gathers dy / count of every window holding it.
__global__ void AvgPoolGradKernel(ConvDims g, const float* __restrict__ dy, float* __restrict__ dx) {
  PSRT_GRID_LOOP(i, g.n * g.h * g.w * g.c) {
    const int64_t ch = i % g.c, iw = (i / g.c) % g.w, ih = (i / (g.c * g.w)) % g.h, n = i / (g.c * g.w * g.h);
    float s = 0.0f;
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t th = ih + g.pad_top - kh;
      if (th < 0 || th % g.sh != 0 || th / g.sh >= g.oh) continue;
      const int64_t oh = th / g.sh;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t tw = iw + g.pad_left - kw;
        if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.ow) continue;
        const int64_t ow = tw / g.sw;
        int64_t h0, h1, ch_count, w0, w1, cw_count;
        AvgSpan(oh, g.sh, g.pad_top, g.kh, g.h, g.pad_bottom, g.count_include_pad, &h0, &h1, &ch_count);
        AvgSpan(ow, g.sw, g.pad_left, g.kw, g.w, g.pad_right, g.count_include_pad, &w0, &w1, &cw_count);
        const int64_t count = ch_count * cw_count;
        if (count > 0) s += dy[((n * g.oh + oh) * g.ow + ow) * g.c + ch] / static_cast<float>(count);
      }
    }
    dx[i] = s;
  }
}

__global__ void MaxPoolKernel(ConvDims g, const float* __restrict__ x, float* __restrict__ y) {
  PSRT_GRID_LOOP(i, g.n * g.oh * g.ow * g.c) {
    const int64_t at = PoolArgmax(g, x, i);
    y[i] = at >= 0 ? x[at] : 0.0f;
  }
}

// Windows overlap when stride < ksize, so two outputs may add to one input.
__global__ void MaxPoolGradKernel(ConvDims g, const float* __restrict__ x, const float* __restrict__ dy,
                                  float* __restrict__ dx) {
  PSRT_GRID_LOOP(i, g.n * g.oh * g.ow * g.c) {
    const int64_t at = PoolArgmax(g, x, i);
    if (at >= 0) atomicAdd(dx + at, dy[i]);
  }
}

__global__ void LookupKernel(const float* __restrict__ rows, int64_t num_rows, int64_t d,
                             const int64_t* __restrict__ index, int64_t b, float* __restrict__ y, ErrorSlot err) {
  PSRT_GRID_LOOP(i, b * d) {
    const int64_t id = index[i / d];
    if (id < 0 || id >= num_rows) {
      RecordError(err);
      y[i] = 0.0f;
    } else {
      y[i] = rows[id * d + i % d];
    }
  }
}

// Repeated ids add to the same row: atomicAdd.
__global__ void LookupGradKernel(const float* __restrict__ dy, const int64_t* __restrict__ index, int64_t b,
                                 int64_t num_rows, int64_t d, float* __restrict__ drows, ErrorSlot err) {
  PSRT_GRID_LOOP(i, b * d) {
    const int64_t id = index[i / d];
    if (id < 0 || id >= num_rows) {
      RecordError(err);
    } else {
      atomicAdd(drows + id * d + i % d, dy[i]);
    }
  }
}

// Bag e's ids are index[splits[e], splits[e+1]); false when they are not
// a valid range of the nnz ids.
__device__ inline bool BagRange(const int64_t* splits, int64_t e, int64_t nnz, int64_t* lo, int64_t* hi) {
  *lo = splits[e];
  *hi = splits[e + 1];
  return *lo >= 0 && *lo <= *hi && *hi <= nnz;
}

__device__ inline void CheckSplitsEnd(const int64_t* splits, int64_t bags, int64_t nnz, ErrorSlot err) {
  if (GlobalIndex() == 0 && splits[bags] != nnz) RecordError(err);
}

// One thread per (bag, column): the bag's ids are summed in order.
__global__ void BagKernel(const float* __restrict__ rows, int64_t num_rows, int64_t d,
                          const int64_t* __restrict__ index, int64_t nnz, const int64_t* __restrict__ splits,
                          int64_t bags, bool mean, float* __restrict__ y, ErrorSlot err) {
  CheckSplitsEnd(splits, bags, nnz, err);
  PSRT_GRID_LOOP(i, bags * d) {
    const int64_t e = i / d, k = i % d;
    int64_t lo, hi;
    float s = 0.0f;
    if (!BagRange(splits, e, nnz, &lo, &hi)) {
      RecordError(err);
      lo = hi = 0;
    }
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t id = index[j];
      if (id < 0 || id >= num_rows) {
        RecordError(err);
        continue;
      }
      s += rows[id * d + k];
    }
    y[i] = mean && hi > lo ? s / static_cast<float>(hi - lo) : s;
  }
}

__global__ void BagGradKernel(const float* __restrict__ dy, const int64_t* __restrict__ index, int64_t nnz,
                              const int64_t* __restrict__ splits, int64_t bags, int64_t num_rows, int64_t d,
                              bool mean, float* __restrict__ drows, ErrorSlot err) {
  CheckSplitsEnd(splits, bags, nnz, err);
  PSRT_GRID_LOOP(i, bags * d) {
    const int64_t e = i / d, k = i % d;
    int64_t lo, hi;
    if (!BagRange(splits, e, nnz, &lo, &hi)) {
      RecordError(err);
      continue;
    }
    const float g = mean && hi > lo ? dy[i] / static_cast<float>(hi - lo) : dy[i];
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t id = index[j];
      if (id < 0 || id >= num_rows) {
        RecordError(err);
        continue;
      }
      atomicAdd(drows + id * d + k, g);
    }
  }
}

// A class label: an integer in [0, n); -1 (and an error) otherwise.
__device__ inline int64_t ClassOf(Labels labels, int64_t r, int64_t n, ErrorSlot err) {
  const double l = LabelAt(labels, r);
  if (!(l >= 0 && l < n && l == floor(l))) {
    RecordError(err);
    return -1;
  }
  return static_cast<int64_t>(l);
}

// Per row (one warp): the max and the sum of exp(x - max).
__device__ inline void RowLogSumExp(const float* x, int64_t n, int lane, float* m, float* s) {
  float mx = -INFINITY;
  for (int64_t i = lane; i < n; i += kWarp) mx = fmaxf(mx, x[i]);
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int64_t i = lane; i < n; i += kWarp) sum += expf(x[i] - mx);
  *m = mx;
  *s = WarpSum(sum);
}

// One block: each warp takes rows (softmax) or each thread takes values
// (sigmoid, MSE); the block sum in double keeps the mean accurate.
__global__ void LossKernel(LossOp op, const float* __restrict__ x, Labels labels, int64_t rows, int64_t n,
                           float smoothing, float* __restrict__ out, ErrorSlot err) {
  double total = 0.0;
  if (op == LossOp::kSoftmaxXent) {
    const int lane = threadIdx.x % kWarp;
    for (int64_t r = threadIdx.x / kWarp; r < rows; r += blockDim.x / kWarp) {
      float m, s;
      RowLogSumExp(x + r * n, n, lane, &m, &s);
      // Label smoothing: the target is (1 - s) at the label plus s / n.
      float row_sum = 0.0f;
      if (smoothing > 0.0f) {
        for (int64_t i = lane; i < n; i += kWarp) row_sum += x[r * n + i];
        row_sum = WarpSum(row_sum);
      }
      if (lane == 0) {
        const int64_t l = ClassOf(labels, r, n, err);
        if (l >= 0) {
          total += log(static_cast<double>(s)) + m - (1.0 - smoothing) * x[r * n + l] -
                   smoothing * static_cast<double>(row_sum) / static_cast<double>(n);
        }
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < rows * n; i += blockDim.x) {
      const double v = x[i], z = LabelAt(labels, i) * (1.0 - smoothing) + 0.5 * smoothing;
      total += op == LossOp::kMse ? (v - z) * (v - z) : fmax(v, 0.0) - v * z + log1p(exp(-fabs(v)));
    }
  }
  total = BlockSum(total);
  if (threadIdx.x == 0) {
    const int64_t count = op == LossOp::kSoftmaxXent ? rows : rows * n;
    out[0] = static_cast<float>(total / static_cast<double>(count));
  }
}

__global__ void SoftmaxXentGradKernel(const float* __restrict__ dl, const float* __restrict__ x, Labels labels,
                                      int64_t rows, int64_t n, float smoothing, float* __restrict__ dx,
                                      ErrorSlot err) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = GridStride() / kWarp;
  const float upstream = dl[0] / static_cast<float>(rows);
  const float off = smoothing / static_cast<float>(n), on = 1.0f - smoothing + off;
  for (int64_t r = GlobalIndex() / kWarp; r < rows; r += warps) {
    float m, s;
    RowLogSumExp(x + r * n, n, lane, &m, &s);
    const int64_t l = ClassOf(labels, r, n, err);
    for (int64_t i = lane; i < n; i += kWarp) {
      const float p = expf(x[r * n + i] - m) / s;
      dx[r * n + i] = upstream * (p - (i == l ? on : off));
    }
  }
}

__global__ void ElementLossGradKernel(LossOp op, const float* __restrict__ dl, const float* __restrict__ x,
                                      Labels labels, int64_t count, float smoothing, float* __restrict__ dx) {
  const float upstream = op == LossOp::kMse ? dl[0] * 2.0f / static_cast<float>(count)
                                            : dl[0] / static_cast<float>(count);
  PSRT_GRID_LOOP(i, count) {
    const double v = x[i], z = LabelAt(labels, i) * (1.0 - smoothing) + 0.5 * smoothing;
    const double g = op == LossOp::kMse ? v - z : 1.0 / (1.0 + exp(-v)) - z;
    dx[i] = upstream * static_cast<float>(g);
  }
}

}  // namespace

GpuError Im2Col(void* stream, const ConvDims& g, const float* d_x, float* d_col) {
  const int64_t total = g.n * g.oh * g.ow * g.kh * g.kw * g.c;
  if (total == 0) return nullptr;
  Im2ColKernel<<<BlocksFor(total), kThreads, 0, S(stream)>>>(g, d_x, d_col);
  return LaunchStatus();
}

GpuError Col2Im(void* stream, const ConvDims& g, const float* d_col, float* d_dx) {
  const int64_t total = g.n * g.h * g.w * g.c;
  if (total == 0) return nullptr;
  Col2ImKernel<<<BlocksFor(total), kThreads, 0, S(stream)>>>(g, d_col, d_dx);
  return LaunchStatus();
}

GpuError MaxPool(void* stream, const ConvDims& g, const float* d_x, float* d_y) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  if (total == 0) return nullptr;
  MaxPoolKernel<<<BlocksFor(total), kThreads, 0, S(stream)>>>(g, d_x, d_y);
  return LaunchStatus();
}

GpuError MaxPoolGrad(void* stream, const ConvDims& g, const float* d_x, const float* d_dy, float* d_dx) {
  if (GpuError e = Zero(stream, d_dx, sizeof(float) * g.n * g.h * g.w * g.c)) return e;
  const int64_t total = g.n * g.oh * g.ow * g.c;
  if (total == 0) return nullptr;
  MaxPoolGradKernel<<<BlocksFor(total), kThreads, 0, S(stream)>>>(g, d_x, d_dy, d_dx);
  return LaunchStatus();
}

GpuError AvgPool(void* stream, const ConvDims& g, const float* d_x, float* d_y) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  if (total == 0) return nullptr;
  AvgPoolKernel<<<BlocksFor(total), kThreads, 0, S(stream)>>>(g, d_x, d_y);
  return LaunchStatus();
}

GpuError AvgPoolGrad(void* stream, const ConvDims& g, const float* d_dy, float* d_dx) {
  const int64_t total = g.n * g.h * g.w * g.c;
  if (total == 0) return nullptr;
  AvgPoolGradKernel<<<BlocksFor(total), kThreads, 0, S(stream)>>>(g, d_dy, d_dx);
  return LaunchStatus();
}

GpuError EmbeddingLookup(void* stream, const float* d_rows, int64_t num_rows, int64_t d, const int64_t* d_index,
                         int64_t b, float* d_y, ErrorSlot err) {
  if (b * d == 0) return nullptr;
  LookupKernel<<<BlocksFor(b * d), kThreads, 0, S(stream)>>>(d_rows, num_rows, d, d_index, b, d_y, err);
  return LaunchStatus();
}

GpuError EmbeddingLookupGrad(void* stream, const float* d_dy, const int64_t* d_index, int64_t b, int64_t num_rows,
                             int64_t d, float* d_drows, ErrorSlot err) {
  if (GpuError e = Zero(stream, d_drows, sizeof(float) * num_rows * d)) return e;
  if (b * d == 0) return nullptr;
  LookupGradKernel<<<BlocksFor(b * d), kThreads, 0, S(stream)>>>(d_dy, d_index, b, num_rows, d, d_drows, err);
  return LaunchStatus();
}

// Launched even with no bags: thread 0 still checks the last split.
GpuError EmbeddingBag(void* stream, const float* d_rows, int64_t num_rows, int64_t d, const int64_t* d_index,
                      int64_t nnz, const int64_t* d_splits, int64_t bags, bool mean, float* d_y, ErrorSlot err) {
  BagKernel<<<BlocksFor(bags * d), kThreads, 0, S(stream)>>>(d_rows, num_rows, d, d_index, nnz, d_splits, bags,
                                                            mean, d_y, err);
  return LaunchStatus();
}

GpuError EmbeddingBagGrad(void* stream, const float* d_dy, const int64_t* d_index, int64_t nnz,
                          const int64_t* d_splits, int64_t bags, int64_t num_rows, int64_t d, bool mean,
                          float* d_drows, ErrorSlot err) {
  if (GpuError e = Zero(stream, d_drows, sizeof(float) * num_rows * d)) return e;
  BagGradKernel<<<BlocksFor(bags * d), kThreads, 0, S(stream)>>>(d_dy, d_index, nnz, d_splits, bags, num_rows, d,
                                                                mean, d_drows, err);
  return LaunchStatus();
}

GpuError Loss(void* stream, LossOp op, const float* d_logits, Labels labels, int64_t rows, int64_t n,
              float smoothing, float* d_out, ErrorSlot err) {
  if (rows * n == 0) return "empty loss input";
  if (op == LossOp::kMse) smoothing = 0.0f;
  LossKernel<<<1, kThreads, 0, S(stream)>>>(op, d_logits, labels, rows, n, smoothing, d_out, err);
  return LaunchStatus();
}

GpuError LossGrad(void* stream, LossOp op, const float* d_dl, const float* d_logits, Labels labels, int64_t rows,
                  int64_t n, float smoothing, float* d_dx, ErrorSlot err) {
  if (rows * n == 0) return nullptr;
  if (op == LossOp::kMse) smoothing = 0.0f;
  if (op == LossOp::kSoftmaxXent) {
    SoftmaxXentGradKernel<<<BlocksFor(rows * kWarp), kThreads, 0, S(stream)>>>(d_dl, d_logits, labels, rows, n,
                                                                               smoothing, d_dx, err);
  } else {
    ElementLossGradKernel<<<BlocksFor(rows * n), kThreads, 0, S(stream)>>>(op, d_dl, d_logits, labels, rows * n,
                                                                           smoothing, d_dx);
  }
  return LaunchStatus();
}

}  // namespace gpu
}  // namespace psrt
