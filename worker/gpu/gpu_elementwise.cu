// Element-wise ops, bias, softmax, strided copies (transpose, slices) and
// dropout.
#include "worker/gpu/gpu_launch.h"
#include "worker/gpu/gpu_ops.h"

namespace psrt {
namespace gpu {
namespace {

__global__ void UnaryKernel(UnaryOp op, const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  PSRT_GRID_LOOP(i, n) {
    const float v = x[i];
    switch (op) {
      case UnaryOp::kRelu: y[i] = fmaxf(v, 0.0f); break;
      case UnaryOp::kSigmoid: y[i] = 1.0f / (1.0f + expf(-v)); break;
      case UnaryOp::kTanh: y[i] = tanhf(v); break;
      case UnaryOp::kErf: y[i] = erff(v); break;
      case UnaryOp::kSqrt: y[i] = sqrtf(v); break;
      case UnaryOp::kGelu: y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
    }
  }
}

constexpr float kTwoOverSqrtPi = 1.1283791670955126f;

// No __restrict__: AddN accumulates in place (out == a).
__global__ void BinaryKernel(BinaryOp op, const float* a, const float* b, float* out, int64_t n) {
  PSRT_GRID_LOOP(i, n) {
    const float u = a[i], v = b[i];
    switch (op) {
      case BinaryOp::kMul: out[i] = u * v; break;
      case BinaryOp::kAdd: out[i] = u + v; break;
      case BinaryOp::kReluGrad: out[i] = v > 0.0f ? u : 0.0f; break;
      case BinaryOp::kSigmoidGrad: out[i] = u * v * (1.0f - v); break;
      case BinaryOp::kTanhGrad: out[i] = u * (1.0f - v * v); break;
      case BinaryOp::kErfGrad: out[i] = u * kTwoOverSqrtPi * expf(-v * v); break;
      case BinaryOp::kSqrtGrad: out[i] = u * 0.5f / v; break;
      case BinaryOp::kGeluGrad:
        out[i] = u * (0.5f * (1.0f + erff(v * 0.70710678118654752f)) + v * 0.39894228040143268f * expf(-0.5f * v * v));
        break;
    }
  }
}

__global__ void FillKernel(float* x, float value, int64_t n) {
  PSRT_GRID_LOOP(i, n) x[i] = value;
}

__device__ inline float PowOf(float x, float e) { return e == 2.0f ? x * x : e == 1.0f ? x : powf(x, e); }

__global__ void PowKernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float e) {
  PSRT_GRID_LOOP(i, n) y[i] = PowOf(x[i], e);
}

__global__ void PowGradKernel(const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ dx,
                              int64_t n, float e) {
  PSRT_GRID_LOOP(i, n) {
    dx[i] = e == 2.0f ? dy[i] * 2.0f * x[i] : e == 1.0f ? dy[i] : dy[i] * e * PowOf(x[i], e - 1.0f);
  }
}

__global__ void BiasAddKernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                              int64_t rows, int64_t n) {
  PSRT_GRID_LOOP(i, rows * n) y[i] = x[i] + b[i % n];
}

// One thread per column walks the rows: neighbouring threads read
// neighbouring addresses, and the sum order is fixed (deterministic).
__global__ void ColumnSumKernel(const float* __restrict__ dy, float* __restrict__ out, int64_t rows, int64_t n) {
  PSRT_GRID_LOOP(j, n) {
    float s = 0.0f;
    for (int64_t r = 0; r < rows; ++r) s += dy[r * n + j];
    out[j] = s;
  }
}

// One warp per row. The row loop bound is the same for all lanes of a warp,
// so the whole warp takes part in every shuffle. With `log`, LogSoftmax.
__global__ void SoftmaxKernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t n,
                              bool log) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = GridStride() / kWarp;
  for (int64_t r = GlobalIndex() / kWarp; r < rows; r += warps) {
    const float* in = x + r * n;
    float* o = y + r * n;
    float m = -INFINITY;
    for (int64_t i = lane; i < n; i += kWarp) m = fmaxf(m, in[i]);
    m = WarpMax(m);  // subtracted so exp never overflows
    float s = 0.0f;
    for (int64_t i = lane; i < n; i += kWarp) {
      const float e = expf(in[i] - m);
      if (!log) o[i] = e;
      s += e;
    }
    s = WarpSum(s);
    if (log) {
      const float shift = m + logf(s);
      for (int64_t i = lane; i < n; i += kWarp) o[i] = in[i] - shift;
    } else {
      for (int64_t i = lane; i < n; i += kWarp) o[i] /= s;
    }
  }
}

// (dy, y) -> dx: y * (dy - sum(dy * y)), or for LogSoftmax dy - exp(y) * sum(dy).
__global__ void SoftmaxGradKernel(const float* __restrict__ dy, const float* __restrict__ y,
                                  float* __restrict__ dx, int64_t rows, int64_t n, bool log) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = GridStride() / kWarp;
  for (int64_t r = GlobalIndex() / kWarp; r < rows; r += warps) {
    const float* g = dy + r * n;
    const float* p = y + r * n;
    float dot = 0.0f;
    for (int64_t i = lane; i < n; i += kWarp) dot += log ? g[i] : g[i] * p[i];
    dot = WarpSum(dot);
    for (int64_t i = lane; i < n; i += kWarp) {
      dx[r * n + i] = log ? g[i] - expf(p[i]) * dot : p[i] * (g[i] - dot);
    }
  }
}

__device__ inline int64_t StridedOffset(const TransposeDims& d, int64_t i) {
  int64_t rest = i, offset = 0;
  for (int k = d.rank - 1; k >= 0; --k) {
    offset += (rest % d.dims[k]) * d.strides[k];
    rest /= d.dims[k];
  }
  return offset;
}

__global__ void TransposeKernel(const float* __restrict__ x, float* __restrict__ y, TransposeDims d, int64_t n) {
  PSRT_GRID_LOOP(i, n) y[i] = x[StridedOffset(d, i)];
}

__global__ void StridedScatterKernel(const float* __restrict__ x, float* __restrict__ y, TransposeDims d, int64_t n) {
  PSRT_GRID_LOOP(i, n) y[StridedOffset(d, i)] = x[i];
}

// SplitMix64's finaliser: a counter-based generator, so element i's draw
// depends on (seed, i) only, not on the launch shape.
__host__ __device__ inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void DropoutKernel(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask,
                              int64_t n, float rate, float scale, uint64_t seed) {
  PSRT_GRID_LOOP(i, n) {
    const uint64_t bits = Mix(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1));
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
    const float m = u >= rate ? scale : 0.0f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

int WarpBlocks(int64_t rows) { return BlocksFor(rows * kWarp); }

}  // namespace

GpuError Unary(void* stream, UnaryOp op, const float* d_x, float* d_y, int64_t n) {
  if (n == 0) return nullptr;
  UnaryKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(op, d_x, d_y, n);
  return LaunchStatus();
}

GpuError Binary(void* stream, BinaryOp op, const float* d_a, const float* d_b, float* d_out, int64_t n) {
  if (n == 0) return nullptr;
  BinaryKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(op, d_a, d_b, d_out, n);
  return LaunchStatus();
}

GpuError Fill(void* stream, float* d_x, float value, int64_t n) {
  if (n == 0) return nullptr;
  FillKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_x, value, n);
  return LaunchStatus();
}

GpuError Pow(void* stream, const float* d_x, float* d_y, int64_t n, float exponent) {
  if (n == 0) return nullptr;
  PowKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_x, d_y, n, exponent);
  return LaunchStatus();
}

GpuError PowGrad(void* stream, const float* d_dy, const float* d_x, float* d_dx, int64_t n, float exponent) {
  if (n == 0) return nullptr;
  PowGradKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_dy, d_x, d_dx, n, exponent);
  return LaunchStatus();
}

GpuError BiasAdd(void* stream, const float* d_x, const float* d_b, float* d_y, int64_t rows, int64_t n) {
  if (rows * n == 0) return nullptr;
  BiasAddKernel<<<BlocksFor(rows * n), kThreads, 0, S(stream)>>>(d_x, d_b, d_y, rows, n);
  return LaunchStatus();
}

GpuError ColumnSum(void* stream, const float* d_dy, float* d_out, int64_t rows, int64_t n) {
  if (n == 0) return nullptr;
  ColumnSumKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_dy, d_out, rows, n);
  return LaunchStatus();
}

static GpuError LaunchSoftmax(void* stream, const float* d_x, float* d_y, int64_t rows, int64_t n, bool log) {
  if (rows * n == 0) return nullptr;
  SoftmaxKernel<<<WarpBlocks(rows), kThreads, 0, S(stream)>>>(d_x, d_y, rows, n, log);
  return LaunchStatus();
}

static GpuError LaunchSoftmaxGrad(void* stream, const float* d_dy, const float* d_y, float* d_dx, int64_t rows, int64_t n,
                                  bool log) {
  if (rows * n == 0) return nullptr;
  SoftmaxGradKernel<<<WarpBlocks(rows), kThreads, 0, S(stream)>>>(d_dy, d_y, d_dx, rows, n, log);
  return LaunchStatus();
}

GpuError Softmax(void* stream, const float* d_x, float* d_y, int64_t rows, int64_t n) {
  return LaunchSoftmax(stream, d_x, d_y, rows, n, false);
}
GpuError LogSoftmax(void* stream, const float* d_x, float* d_y, int64_t rows, int64_t n) {
  return LaunchSoftmax(stream, d_x, d_y, rows, n, true);
}
GpuError SoftmaxGrad(void* stream, const float* d_dy, const float* d_y, float* d_dx, int64_t rows, int64_t n) {
  return LaunchSoftmaxGrad(stream, d_dy, d_y, d_dx, rows, n, false);
}
GpuError LogSoftmaxGrad(void* stream, const float* d_dy, const float* d_y, float* d_dx, int64_t rows, int64_t n) {
  return LaunchSoftmaxGrad(stream, d_dy, d_y, d_dx, rows, n, true);
}

GpuError Transpose(void* stream, const float* d_x, float* d_y, const TransposeDims& d, int64_t n) {
  if (n == 0) return nullptr;
  if (d.rank < 1 || d.rank > kMaxTransposeRank) return "transpose rank out of range";
  TransposeKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_x, d_y, d, n);
  return LaunchStatus();
}

GpuError StridedScatter(void* stream, const float* d_x, float* d_y, const TransposeDims& d, int64_t n) {
  if (n == 0) return nullptr;
  if (d.rank < 1 || d.rank > kMaxTransposeRank) return "scatter rank out of range";
  StridedScatterKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_x, d_y, d, n);
  return LaunchStatus();
}

GpuError Dropout(void* stream, const float* d_x, float* d_y, float* d_mask, int64_t n, float rate, uint64_t seed) {
  if (n == 0) return nullptr;
  if (!(rate >= 0.0f && rate < 1.0f)) return "dropout rate must be in [0, 1)";
  DropoutKernel<<<BlocksFor(n), kThreads, 0, S(stream)>>>(d_x, d_y, d_mask, n, rate, 1.0f / (1.0f - rate),
                                                         Mix(seed));
  return LaunchStatus();
}

}  // namespace gpu
}  // namespace psrt
