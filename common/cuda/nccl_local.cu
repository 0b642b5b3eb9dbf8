#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda/nccl_local.h"

namespace psrt {
namespace cuda {

struct NcclLocalComms {
  int n = 0;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<float*> buffers;  // device r's staging buffer, grown on demand
  std::vector<size_t> capacity;
  std::atomic<bool> broken{false};
  std::mutex abort_mu;
  bool aborted = false;  // under abort_mu: the communicators were aborted (not destroyed)
  std::string why_broken;
};

namespace {

std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Aborts every communicator once: ranks still waiting see `broken` and fail.
void BreakGroup(NcclLocalComms* c, const std::string& why) {
  std::lock_guard<std::mutex> l(c->abort_mu);
  if (c->aborted) return;
  c->aborted = true;
  c->why_broken = why;
  c->broken.store(true);
  for (ncclComm_t comm : c->comms) {
    if (comm != nullptr) ncclCommAbort(comm);
  }
}

NcclResult Fail(NcclLocalComms* c, NcclCode code, const std::string& why) {
  BreakGroup(c, why);
  return {code, why};
}

// Device r's buffer holds at least n floats.
NcclResult EnsureBuffer(NcclLocalComms* c, int r, size_t n) {
  if (c->capacity[r] >= n) return {};
  if (c->buffers[r] != nullptr) cudaFree(c->buffers[r]);
  c->buffers[r] = nullptr;
  c->capacity[r] = 0;
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, n * sizeof(float));
  if (e != cudaSuccess) return Fail(c, NcclCode::kUnavailable, "cudaMalloc on GPU " + std::to_string(r) + ": " + CudaText(e));
  c->buffers[r] = static_cast<float*>(p);
  c->capacity[r] = n;
  return {};
}

// Polls rank r's stream (the collective and both copies) until it drains.
NcclResult Wait(NcclLocalComms* c, int r, int64_t timeout_ms, const std::atomic<bool>* abort) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    cudaError_t q = cudaStreamQuery(c->streams[r]);
    if (q == cudaSuccess) return {};
    if (q != cudaErrorNotReady) return Fail(c, NcclCode::kUnavailable, "GPU " + std::to_string(r) + ": " + CudaText(q));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(c->comms[r], &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      return Fail(c, NcclCode::kUnavailable, std::string("NCCL: ") + ncclGetErrorString(async));
    }
    if (abort != nullptr && abort->load()) return Fail(c, NcclCode::kAborted, "aborted");
    if (c->broken.load()) return {NcclCode::kUnavailable, "another rank failed: " + c->why_broken};
    if (std::chrono::steady_clock::now() > deadline) {
      return Fail(c, NcclCode::kDeadline,
                  "GPU " + std::to_string(r) + ": the collective made no progress for " + std::to_string(timeout_ms) +
                      " ms (a rank that never joined, or one with another size)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

NcclResult Run(NcclLocalComms* c, int r, float* data, size_t n, int root, bool broadcast, int64_t timeout_ms,
               const std::atomic<bool>* abort) {
  if (c == nullptr || r < 0 || r >= c->n) return {NcclCode::kInvalid, "rank out of range"};
  if (c->broken.load()) return {NcclCode::kUnavailable, "the group failed earlier: " + c->why_broken};
  if (n == 0) return {};
  cudaError_t e = cudaSetDevice(r);
  if (e != cudaSuccess) return Fail(c, NcclCode::kUnavailable, "cudaSetDevice(" + std::to_string(r) + "): " + CudaText(e));
  NcclResult b = EnsureBuffer(c, r, n);
  if (!b.ok()) return b;
  const size_t bytes = n * sizeof(float);
  e = cudaMemcpyAsync(c->buffers[r], data, bytes, cudaMemcpyHostToDevice, c->streams[r]);
  if (e != cudaSuccess) return Fail(c, NcclCode::kUnavailable, "copy to GPU " + std::to_string(r) + ": " + CudaText(e));
  ncclResult_t nr = broadcast ? ncclBroadcast(c->buffers[r], c->buffers[r], n, ncclFloat, root, c->comms[r], c->streams[r])
                              : ncclAllReduce(c->buffers[r], c->buffers[r], n, ncclFloat, ncclSum, c->comms[r], c->streams[r]);
  if (nr != ncclSuccess && nr != ncclInProgress) {
    return Fail(c, NcclCode::kUnavailable, std::string("NCCL: ") + ncclGetErrorString(nr));
  }
  e = cudaMemcpyAsync(data, c->buffers[r], bytes, cudaMemcpyDeviceToHost, c->streams[r]);
  if (e != cudaSuccess) return Fail(c, NcclCode::kUnavailable, "copy from GPU " + std::to_string(r) + ": " + CudaText(e));
  return Wait(c, r, timeout_ms, abort);
}

}  // namespace

NcclResult NcclLocalCreate(int n, NcclLocalComms** out) {
  *out = nullptr;
  int visible = 0;
  cudaError_t e = cudaGetDeviceCount(&visible);
  if (e != cudaSuccess) return {NcclCode::kUnavailable, "no CUDA device: " + CudaText(e)};
  if (n < 1 || n > visible) {
    return {NcclCode::kUnavailable, std::to_string(n) + " GPUs asked for, " + std::to_string(visible) + " visible"};
  }
  auto* c = new NcclLocalComms();
  c->n = n;
  c->comms.assign(n, nullptr);
  c->streams.assign(n, nullptr);
  c->buffers.assign(n, nullptr);
  c->capacity.assign(n, 0);
  ncclResult_t nr = ncclCommInitAll(c->comms.data(), n, nullptr);
  if (nr != ncclSuccess) {
    c->comms.assign(n, nullptr);
    NcclLocalDestroy(c);
    return {NcclCode::kUnavailable, std::string("ncclCommInitAll: ") + ncclGetErrorString(nr)};
  }
  for (int r = 0; r < n; ++r) {
    e = cudaSetDevice(r);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->streams[r], cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      NcclLocalDestroy(c);
      return {NcclCode::kUnavailable, "stream on GPU " + std::to_string(r) + ": " + CudaText(e)};
    }
  }
  *out = c;
  return {};
}

void NcclLocalDestroy(NcclLocalComms* c) {
  if (c == nullptr) return;
  for (int r = 0; r < c->n; ++r) {
    cudaSetDevice(r);
    if (c->streams[r] != nullptr) cudaStreamDestroy(c->streams[r]);
    if (c->buffers[r] != nullptr) cudaFree(c->buffers[r]);
    if (!c->aborted && c->comms[r] != nullptr) ncclCommDestroy(c->comms[r]);
  }
  delete c;
}

NcclResult NcclLocalAllReduceSum(NcclLocalComms* c, int rank, float* data, size_t n, int64_t timeout_ms,
                                 const std::atomic<bool>* abort) {
  return Run(c, rank, data, n, 0, /*broadcast=*/false, timeout_ms, abort);
}

NcclResult NcclLocalBroadcast(NcclLocalComms* c, int rank, float* data, size_t n, int root, int64_t timeout_ms,
                              const std::atomic<bool>* abort) {
  if (c != nullptr && (root < 0 || root >= c->n)) return {NcclCode::kInvalid, "root out of range"};
  return Run(c, rank, data, n, root, /*broadcast=*/true, timeout_ms, abort);
}

}  // namespace cuda
}  // namespace psrt
