// LocalCollectiveGroup: N ranks inside one process (one thread each), for
// mirrored devices of one worker and for unit tests of code that takes a
// Collective.
//
// Each call is a rendezvous: when all N ranks have arrived, rank i sums the
// i-th slice of the buffer over ranks 0, 1, ..., N-1 (in that order) into
// a shared result; after a second barrier every rank copies the result
// into its own buffer, and a third one keeps every buffer alive until all
// ranks have copied. So all ranks get the same bits. Ranks must make the
// same calls with the same n (and root); a mismatch fails the group with
// INVALID_ARGUMENT. Only the arrival waits on other ranks (with the
// timeout); the later barriers wait for bounded in-process work.
//
// Threads: each rank object is used by one thread at a time; Abort from
// any thread. A failure on any rank (timeout, Abort, mismatch) breaks the
// whole group: ranks waiting in a call wake up with that status, and every
// later call on any rank fails at once with it.
//
//   std::vector<std::unique_ptr<Collective>> ranks = LocalCollectiveGroup::Create(4);
//   // thread i: RETURN_IF_ERROR(ranks[i]->AllReduceSum(grad_i, n));
#ifndef PSRT_COMMON_COLLECTIVE_LOCAL_COLLECTIVE_H_
#define PSRT_COMMON_COLLECTIVE_LOCAL_COLLECTIVE_H_

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "common/collective/collective.h"

namespace psrt {

class LocalCollectiveGroup {
 public:
  // n >= 1 ranks sharing one group. A rank that waits longer than `timeout`
  // for the others fails the group with DEADLINE_EXCEEDED.
  static std::vector<std::unique_ptr<Collective>> Create(int n,
                                                         absl::Duration timeout = absl::Seconds(10));
};

}  // namespace psrt

#endif  // PSRT_COMMON_COLLECTIVE_LOCAL_COLLECTIVE_H_
