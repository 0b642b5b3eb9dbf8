// The CUDA side of the GPU kernels: plain-pointer launchers, the stream,
// cuBLAS and device memory. Every function returns nullptr on success or a
// static description of the CUDA/cuBLAS error; the C++ kernels turn that
// into an absl::Status naming the node.
//
// This header is all nvcc sees (the .cu files are compiled outside the C++
// toolchain), so it holds no absl, Eigen or protobuf types, and no CUDA
// types either: streams and handles are opaque pointers, so the C++ side
// compiles without CUDA headers.
//
// Launches are asynchronous on the given stream; only the Copy*ToHost and
// Synchronize calls wait. Pointers named d_* are device memory.
#ifndef PSRT_WORKER_GPU_GPU_OPS_H_
#define PSRT_WORKER_GPU_GPU_OPS_H_

#include <cstddef>
#include <cstdint>

namespace psrt {
namespace gpu {

using GpuError = const char*;  // nullptr = ok

// --- runtime (gpu_runtime.cu) ---
// Makes GPU `ordinal` the calling thread's current device (CUDA's current
// device is per thread: every thread that works on a device sets it first).
GpuError SetDevice(int ordinal);
// A non-blocking stream and a cuBLAS handle bound to it, on GPU `ordinal`
// (which becomes the calling thread's current device).
GpuError CreateStream(void** stream, void** blas, int ordinal);
GpuError DestroyStream(void* stream, void* blas);
GpuError Synchronize(void* stream);
GpuError DeviceAlloc(void** d_ptr, size_t bytes);
GpuError DeviceFree(void* d_ptr);
GpuError CopyToDevice(void* stream, void* d_dst, const void* src, size_t bytes);
// Waits for the stream, so `dst` is filled on return.
GpuError CopyToHost(void* stream, void* dst, const void* d_src, size_t bytes);
GpuError CopyOnDevice(void* stream, void* d_dst, const void* d_src, size_t bytes);
// `rows` runs of `width` bytes, with the given strides (concatenation).
GpuError CopyRows(void* stream, void* d_dst, size_t dst_stride, const void* d_src,
                  size_t src_stride, size_t width, size_t rows);
GpuError Zero(void* stream, void* d_ptr, size_t bytes);

// Row-major C[m,n] = op(A) op(B) (+ beta * C), op = transpose when ta/tb.
// lda/ldb/ldc are the row lengths of A, B, C as stored.
GpuError Gemm(void* blas, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* d_a,
              int64_t lda, const float* d_b, int64_t ldb, float beta, float* d_c, int64_t ldc);

// A batch of row-major products: for i < batch, C_i = op(A_i) op(B_i)
// with A_i = d_a + i * stride_a (likewise B, C); a stride of 0 shares one
// matrix across the batch. With k = 0 the C_i are zeroed (C packed:
// stride_c == m * ldc).
struct GemmBatch {
  int64_t batch, stride_a, stride_b, stride_c;
};
GpuError GemmStridedBatched(void* blas, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* d_a,
                            int64_t lda, const float* d_b, int64_t ldb, float* d_c, int64_t ldc, const GemmBatch& g);

// --- element-wise and row ops (gpu_elementwise.cu) ---
enum class UnaryOp { kRelu, kSigmoid, kTanh, kErf, kSqrt, kGelu };
// (a, b) = (dy, y) for grads, but (dy, x) for kErfGrad and kGeluGrad.
enum class BinaryOp { kMul, kAdd, kReluGrad, kSigmoidGrad, kTanhGrad, kErfGrad, kSqrtGrad, kGeluGrad };

GpuError Unary(void* stream, UnaryOp op, const float* d_x, float* d_y, int64_t n);
GpuError Binary(void* stream, BinaryOp op, const float* d_a, const float* d_b, float* d_out, int64_t n);
GpuError Fill(void* stream, float* d_x, float value, int64_t n);
// y = x^exponent; dx = dy * exponent * x^(exponent - 1) (2x for 2, dy for 1).
GpuError Pow(void* stream, const float* d_x, float* d_y, int64_t n, float exponent);
GpuError PowGrad(void* stream, const float* d_dy, const float* d_x, float* d_dx, int64_t n, float exponent);
// y[r, j] = x[r, j] + b[j]
GpuError BiasAdd(void* stream, const float* d_x, const float* d_b, float* d_y, int64_t rows, int64_t n);
// out[j] = sum_r dy[r, j]
GpuError ColumnSum(void* stream, const float* d_dy, float* d_out, int64_t rows, int64_t n);
GpuError Softmax(void* stream, const float* d_x, float* d_y, int64_t rows, int64_t n);
GpuError SoftmaxGrad(void* stream, const float* d_dy, const float* d_y, float* d_dx, int64_t rows, int64_t n);
// Over the last axis: y = x - log(sum(exp(x))); dx = dy - exp(y) * sum(dy).
GpuError LogSoftmax(void* stream, const float* d_x, float* d_y, int64_t rows, int64_t n);
GpuError LogSoftmaxGrad(void* stream, const float* d_dy, const float* d_y, float* d_dx, int64_t rows, int64_t n);
// y[i] = x[offset of i]: y's dims, and for each of y's axes the step in x.
inline constexpr int kMaxTransposeRank = 8;
struct TransposeDims {
  int rank;
  int64_t dims[kMaxTransposeRank];
  int64_t strides[kMaxTransposeRank];
};
GpuError Transpose(void* stream, const float* d_x, float* d_y, const TransposeDims& d, int64_t n);
// The other direction: y[offset of i] = x[i] for x's n elements (x's dims,
// and for each the step in y). Slice is a Transpose from its first cell,
// SliceGrad this into zeros.
GpuError StridedScatter(void* stream, const float* d_x, float* d_y, const TransposeDims& d, int64_t n);
// mask[i] = keep ? 1/(1-rate) : 0 from a counter-based hash of (seed, i);
// y = x * mask.
GpuError Dropout(void* stream, const float* d_x, float* d_y, float* d_mask, int64_t n, float rate,
                 uint64_t seed);

// --- broadcasting arithmetic, reductions, clip (gpu_math.cu) ---
// A coalesced broadcast walk (see common/compute/kernels/broadcast.h):
// output dims and each input's step along them (0: repeated).
inline constexpr int kMaxBroadcastRank = 8;
struct BroadcastDims {
  int rank;
  int64_t dims[kMaxBroadcastRank];
  int64_t stride_a[kMaxBroadcastRank];
  int64_t stride_b[kMaxBroadcastRank];
};
enum class BroadcastOp { kAdd, kSub, kMul, kDiv, kFirst };  // kFirst: a alone, b not read
// out[i] = scale * op(a, b) over the n output elements.
GpuError Broadcast(void* stream, BroadcastOp op, const BroadcastDims& d, const float* d_a, const float* d_b,
                   float* d_out, int64_t n, float scale);
// Coalesced input dims, whether each is reduced; out holds the kept ones.
struct ReduceDims {
  int rank;
  int64_t dims[kMaxBroadcastRank];
  bool reduced[kMaxBroadcastRank];
};
// out[o] = scale * sum of the in cells of output o (one thread each).
GpuError Reduce(void* stream, const ReduceDims& d, const float* d_in, float* d_out, int64_t out_size,
                float scale);
GpuError Clip(void* stream, const float* d_x, float* d_y, int64_t n, float lo, float hi);
// dx = dy where lo < x < hi, else 0.
GpuError ClipGrad(void* stream, const float* d_dy, const float* d_x, float* d_dx, int64_t n, float lo, float hi);

// Batch normalisation of x [rows, ch] (channels last) with the batch's
// statistics, as the CPU kernel: mean and biased var per channel (one
// thread per channel, sums in double), then y = (x - mean) * rsqrt(var +
// eps) * scale + offset.
GpuError BatchNormStats(void* stream, const float* d_x, int64_t rows, int64_t ch, float* d_mean, float* d_var);
GpuError BatchNormApply(void* stream, const float* d_x, const float* d_scale, const float* d_offset,
                        const float* d_mean, const float* d_var, float eps, int64_t rows, int64_t ch, float* d_y);
// doffset = sum(dy), dscale = sum(dy * xhat) per channel; then dx.
GpuError BatchNormGradSums(void* stream, const float* d_dy, const float* d_x, const float* d_mean, const float* d_var,
                           float eps, int64_t rows, int64_t ch, float* d_dscale, float* d_doffset);
GpuError BatchNormGradInput(void* stream, const float* d_dy, const float* d_x, const float* d_scale,
                            const float* d_mean, const float* d_var, const float* d_dscale, const float* d_doffset,
                            float eps, int64_t rows, int64_t ch, float* d_dx);

// Layer normalisation of x [rows, d] over its last axis (one warp per row,
// statistics in double): y = (x - mean) * rsqrt(var + eps) * gamma + beta,
// var biased.
GpuError LayerNorm(void* stream, const float* d_x, const float* d_gamma, const float* d_beta, float eps,
                   int64_t rows, int64_t d, float* d_y);
// Its gradient, mean and rstd recomputed from x. d_stats is scratch for
// 2 * rows floats. With xhat = (x - mean) * rstd and g = dy * gamma:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) per row;
// dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy.
GpuError LayerNormGrad(void* stream, const float* d_dy, const float* d_x, const float* d_gamma, float eps,
                       int64_t rows, int64_t d, float* d_stats, float* d_dx, float* d_dgamma, float* d_dbeta);

// --- convolution, pooling, embeddings, losses (gpu_nn.cu) ---
struct ConvDims {  // as ConvGeometry in the CPU kernels: NHWC input
  int64_t n, h, w, c, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, pad_bottom, pad_right, group;
  bool count_include_pad;
};
// col [n*oh*ow, kh*kw*c] from x, each row [group, kh, kw, c / group];
// zeros where the window is off the image.
GpuError Im2Col(void* stream, const ConvDims& g, const float* d_x, float* d_col);
// dx [n,h,w,c] = sum of every col entry that reads it (a gather: no atomics).
GpuError Col2Im(void* stream, const ConvDims& g, const float* d_col, float* d_dx);
GpuError MaxPool(void* stream, const ConvDims& g, const float* d_x, float* d_y);
// dx = 0, then each dy adds to its window's first maximum.
GpuError MaxPoolGrad(void* stream, const ConvDims& g, const float* d_x, const float* d_dy, float* d_dx);
// Dense windows (no dilation); the divisor as the CPU kernel's.
GpuError AvgPool(void* stream, const ConvDims& g, const float* d_x, float* d_y);
GpuError AvgPoolGrad(void* stream, const ConvDims& g, const float* d_dy, float* d_dx);

// Bad ids or row splits cannot be seen on the host without a copy, so the
// kernels skip them and store `code` in *d_error (first one wins); the
// executor reads it after the step and names the node.
struct ErrorSlot {
  int* d_error;
  int code;
};
GpuError EmbeddingLookup(void* stream, const float* d_rows, int64_t num_rows, int64_t d,
                         const int64_t* d_index, int64_t b, float* d_y, ErrorSlot err);
GpuError EmbeddingLookupGrad(void* stream, const float* d_dy, const int64_t* d_index, int64_t b,
                             int64_t num_rows, int64_t d, float* d_drows, ErrorSlot err);
GpuError EmbeddingBag(void* stream, const float* d_rows, int64_t num_rows, int64_t d,
                      const int64_t* d_index, int64_t nnz, const int64_t* d_splits, int64_t bags,
                      bool mean, float* d_y, ErrorSlot err);
GpuError EmbeddingBagGrad(void* stream, const float* d_dy, const int64_t* d_index, int64_t nnz,
                          const int64_t* d_splits, int64_t bags, int64_t num_rows, int64_t d, bool mean,
                          float* d_drows, ErrorSlot err);

// Labels are int64 or float, as on the CPU.
struct Labels {
  const void* d_data;
  bool is_int64;
};
enum class LossOp { kSoftmaxXent, kSigmoidXent, kMse };
// d_out[0] = the mean loss. Softmax: logits [rows, n], labels [rows].
// Sigmoid and MSE: element-wise over rows * n values. `smoothing`: Keras'
// label_smoothing of the cross-entropies (0 = off; MSE ignores it).
GpuError Loss(void* stream, LossOp op, const float* d_logits, Labels labels, int64_t rows, int64_t n,
              float smoothing, float* d_out, ErrorSlot err);
// dx = d_dl[0] * dLoss/dlogits.
GpuError LossGrad(void* stream, LossOp op, const float* d_dl, const float* d_logits, Labels labels,
                  int64_t rows, int64_t n, float smoothing, float* d_dx, ErrorSlot err);

}  // namespace gpu
}  // namespace psrt

#endif  // PSRT_WORKER_GPU_GPU_OPS_H_
