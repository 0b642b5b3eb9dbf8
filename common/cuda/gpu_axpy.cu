#include <cuda_runtime.h>

#include "common/cuda/gpu_axpy.h"

namespace psrt {
namespace cuda {
namespace {

__global__ void AxpyKernel(float a, const float* __restrict__ x, float* __restrict__ y,
                           int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    y[i] = fmaf(a, x[i], y[i]);
  }
}

std::string Err(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

}  // namespace

GpuProbe ProbeGpu() {
  GpuProbe p;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
    p.why_not = "no CUDA driver on this machine";
    return p;
  }
  cudaError_t e = cudaGetDeviceCount(&p.device_count);
  if (e != cudaSuccess || p.device_count == 0) {
    p.device_count = 0;
    p.why_not = e != cudaSuccess ? Err(e) : "no CUDA device";
    return p;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) p.name = prop.name;
  p.available = true;
  return p;
}

void AxpyCpu(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fmaf(a, x[i], y[i]);
}

std::string AxpyGpu(float a, const float* x, float* y, int64_t n) {
  float* dx = nullptr;
  float* dy = nullptr;
  size_t bytes = static_cast<size_t>(n) * sizeof(float);
  cudaError_t e = cudaMalloc(&dx, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&dy, bytes);
  if (e == cudaSuccess) e = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    int threads = 256;
    int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
    AxpyKernel<<<blocks > 0 ? blocks : 1, threads>>>(a, dx, dy, n);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  return e == cudaSuccess ? std::string() : Err(e);
}

}  // namespace cuda
}  // namespace psrt
