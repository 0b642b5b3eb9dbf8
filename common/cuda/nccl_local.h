// NCCL across the GPUs of one process: the local all-reduce of a worker's
// mirrored GPU devices (TensorFlow's MirroredStrategy uses NCCL the same way).
// The C++ Collective on top of it is common/collective/nccl_local_collective.
//
// Plain types only: nvcc compiles nccl_local.cu against this header alone.
// Without --config=cuda (nccl_local_nocuda.cc) Create says why and nothing
// else is reachable.
//
// Threads: rank r's calls come from one thread at a time (any thread: each
// call makes device r current first); Abort from any thread.
#ifndef PSRT_COMMON_CUDA_NCCL_LOCAL_H_
#define PSRT_COMMON_CUDA_NCCL_LOCAL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace psrt {
namespace cuda {

enum class NcclCode { kOk, kUnavailable, kDeadline, kAborted, kInvalid };

struct NcclResult {
  NcclCode code = NcclCode::kOk;
  std::string message;  // empty when kOk
  bool ok() const { return code == NcclCode::kOk; }
};

struct NcclLocalComms;  // one communicator, stream and device buffer per rank

// One communicator per device 0..n-1 (ncclCommInitAll). kUnavailable when
// built without CUDA, or fewer than n devices are visible.
NcclResult NcclLocalCreate(int n, NcclLocalComms** out);
void NcclLocalDestroy(NcclLocalComms* c);

// Rank r: host data[0..n) to device r, ncclAllReduce(sum) / ncclBroadcast
// with the other ranks, back to data. Waits until done, `abort` is set
// (kAborted), `timeout_ms` passes without completion (kDeadline) or NCCL
// reports an asynchronous error (kUnavailable). On any failure every
// communicator is aborted: the group is broken.
NcclResult NcclLocalAllReduceSum(NcclLocalComms* c, int rank, float* data, size_t n, int64_t timeout_ms,
                                 const std::atomic<bool>* abort);
NcclResult NcclLocalBroadcast(NcclLocalComms* c, int rank, float* data, size_t n, int root, int64_t timeout_ms,
                              const std::atomic<bool>* abort);

}  // namespace cuda
}  // namespace psrt

#endif  // PSRT_COMMON_CUDA_NCCL_LOCAL_H_
