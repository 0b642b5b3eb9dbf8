// Stream, cuBLAS handle, device memory and copies.
#include <cublas_v2.h>

#include <initializer_list>

#include "worker/gpu/gpu_launch.h"
#include "worker/gpu/gpu_ops.h"

namespace psrt {
namespace gpu {
namespace {

GpuError Check(cudaError_t e) { return e == cudaSuccess ? nullptr : cudaGetErrorString(e); }
GpuError Check(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? nullptr : cublasGetStatusString(s); }

}  // namespace

GpuError SetDevice(int ordinal) { return Check(cudaSetDevice(ordinal)); }

GpuError CreateStream(void** stream, void** blas, int ordinal) {
  *stream = nullptr;
  *blas = nullptr;
  if (GpuError e = Check(cudaSetDevice(ordinal))) return e;
  cudaStream_t s = nullptr;
  if (GpuError e = Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) return e;
  cublasHandle_t h = nullptr;
  GpuError e = Check(cublasCreate(&h));
  if (e == nullptr) e = Check(cublasSetStream(h, s));
  // Plain FP32 products: the results are compared with the CPU kernels.
  if (e == nullptr) e = Check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  if (e != nullptr) {
    if (h != nullptr) cublasDestroy(h);
    cudaStreamDestroy(s);
    return e;
  }
  *stream = s;
  *blas = h;
  return nullptr;
}

GpuError DestroyStream(void* stream, void* blas) {
  GpuError e = nullptr;
  if (stream != nullptr) e = Check(cudaStreamSynchronize(S(stream)));
  if (blas != nullptr) {
    GpuError b = Check(cublasDestroy(static_cast<cublasHandle_t>(blas)));
    if (e == nullptr) e = b;
  }
  if (stream != nullptr) {
    GpuError d = Check(cudaStreamDestroy(S(stream)));
    if (e == nullptr) e = d;
  }
  return e;
}

GpuError Synchronize(void* stream) { return Check(cudaStreamSynchronize(S(stream))); }

GpuError DeviceAlloc(void** d_ptr, size_t bytes) {
  *d_ptr = nullptr;
  cudaError_t e = cudaMalloc(d_ptr, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // cudaMalloc's error is not sticky; clear it for the next launch check
    *d_ptr = nullptr;
  }
  return Check(e);
}

GpuError DeviceFree(void* d_ptr) { return Check(cudaFree(d_ptr)); }

GpuError CopyToDevice(void* stream, void* d_dst, const void* src, size_t bytes) {
  if (bytes == 0) return nullptr;
  return Check(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, S(stream)));
}

GpuError CopyToHost(void* stream, void* dst, const void* d_src, size_t bytes) {
  if (bytes > 0) {
    if (GpuError e = Check(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, S(stream)))) return e;
  }
  return Check(cudaStreamSynchronize(S(stream)));
}

GpuError CopyOnDevice(void* stream, void* d_dst, const void* d_src, size_t bytes) {
  if (bytes == 0) return nullptr;
  return Check(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, S(stream)));
}

GpuError CopyRows(void* stream, void* d_dst, size_t dst_stride, const void* d_src, size_t src_stride,
                  size_t width, size_t rows) {
  if (width == 0 || rows == 0) return nullptr;
  return Check(cudaMemcpy2DAsync(d_dst, dst_stride, d_src, src_stride, width, rows,
                                 cudaMemcpyDeviceToDevice, S(stream)));
}

GpuError Zero(void* stream, void* d_ptr, size_t bytes) {
  if (bytes == 0) return nullptr;
  return Check(cudaMemsetAsync(d_ptr, 0, bytes, S(stream)));
}

// cuBLAS is column-major. A row-major [r, c] matrix is its transpose seen
// column-major, so C = op(A) op(B) row-major is C^T = op(B)^T op(A)^T
// column-major: swap the operands and the sizes m and n; the transpose
// flags stay as they are.
namespace {

bool OverInt(std::initializer_list<int64_t> v) {
  for (int64_t x : v) {
    if (x > 0x7fffffff) return true;
  }
  return false;
}

// Zeroes `rows` runs of n floats, ldc apart, on the handle's stream.
GpuError ZeroRows(void* blas, float* d_c, int64_t ldc, int64_t n, int64_t rows) {
  cudaStream_t s = nullptr;
  if (GpuError e = Check(cublasGetStream(static_cast<cublasHandle_t>(blas), &s))) return e;
  return Check(cudaMemset2DAsync(d_c, ldc * sizeof(float), 0, n * sizeof(float), rows, s));
}

}  // namespace

GpuError Gemm(void* blas, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* d_a, int64_t lda,
              const float* d_b, int64_t ldb, float beta, float* d_c, int64_t ldc) {
  if (m == 0 || n == 0) return nullptr;
  if (OverInt({m, n, k, lda, ldb, ldc})) return "matrix dimension over 2^31 (cublasSgemm takes int)";
  const float alpha = 1.0f;
  if (k == 0) {  // an empty sum: C = beta * C, done here rather than trusting cuBLAS with k = 0
    if (beta != 0.0f) return beta == 1.0f ? nullptr : "Gemm with k = 0 and beta not 0 or 1";
    return ZeroRows(blas, d_c, ldc, n, m);
  }
  return Check(cublasSgemm(static_cast<cublasHandle_t>(blas), tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                           ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                           static_cast<int>(k), &alpha, d_b, static_cast<int>(ldb), d_a,
                           static_cast<int>(lda), &beta, d_c, static_cast<int>(ldc)));
}

// As Gemm, with the batch strides; cuBLAS takes a stride of 0 (one matrix
// for every entry).
GpuError GemmStridedBatched(void* blas, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* d_a,
                            int64_t lda, const float* d_b, int64_t ldb, float* d_c, int64_t ldc, const GemmBatch& g) {
  if (m == 0 || n == 0 || g.batch == 0) return nullptr;
  if (OverInt({m, n, k, lda, ldb, ldc, g.batch})) return "matrix dimension or batch over 2^31 (cuBLAS takes int)";
  if (k == 0) {
    if (g.stride_c != m * ldc) return "batched Gemm with k = 0 needs a packed C";
    return ZeroRows(blas, d_c, ldc, n, g.batch * m);
  }
  const float alpha = 1.0f, beta = 0.0f;
  return Check(cublasSgemmStridedBatched(
      static_cast<cublasHandle_t>(blas), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, d_b, static_cast<int>(ldb), g.stride_b,
      d_a, static_cast<int>(lda), g.stride_a, &beta, d_c, static_cast<int>(ldc), g.stride_c,
      static_cast<int>(g.batch)));
}

}  // namespace gpu
}  // namespace psrt
