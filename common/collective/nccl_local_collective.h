// NcclLocalGroup: the Collective of N GPU devices inside one worker process,
// over NCCL (ring/tree all-reduce on NVLink or PCIe), for mirrored GPU
// devices; LocalCollectiveGroup is its CPU twin and the fallback.
//
// Same contract as every Collective (collective.h): each rank's calls come
// from one thread, every rank gets the same bytes (NCCL reduces each element
// once and broadcasts the result), failures never hang (DEADLINE_EXCEEDED
// after `timeout` without completion, e.g. a rank that never calls or calls
// with another size; ABORTED after Abort()), and a failure breaks the whole
// group. The sum's order is NCCL's, not rank order, so results may differ
// from LocalCollectiveGroup's in the last bits (not between ranks).
//
//   ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Collective>> ranks, NcclLocalGroup::Create(4));
//   // thread i (any thread; device i is made current per call):
//   RETURN_IF_ERROR(ranks[i]->AllReduceSum(host_grad_i, n));
#ifndef PSRT_COMMON_COLLECTIVE_NCCL_LOCAL_COLLECTIVE_H_
#define PSRT_COMMON_COLLECTIVE_NCCL_LOCAL_COLLECTIVE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/collective/collective.h"

namespace psrt {

class NcclLocalGroup {
 public:
  // n ranks on GPUs 0..n-1. FAILED_PRECONDITION when built without CUDA or
  // fewer than n GPUs are visible (the caller falls back to the CPU group).
  static absl::StatusOr<std::vector<std::unique_ptr<Collective>>> Create(int n,
                                                                         absl::Duration timeout = absl::Seconds(10));
};

}  // namespace psrt

#endif  // PSRT_COMMON_COLLECTIVE_NCCL_LOCAL_COLLECTIVE_H_
