// Collective: the synchronous all-reduce a worker calls once per training
// step (multi-worker mirrored strategy), and the broadcast that gives every
// replica the same initial variables.
//
// Contract shared by every implementation:
//   * Each rank calls the same sequence of operations with the same sizes
//     (and roots). A rank that calls something else fails the group.
//   * AllReduceSum and Broadcast are called from one thread at a time per
//     object (the step loop); Abort may be called from any thread.
//   * Failure never hangs: UNAVAILABLE when a peer is dead or disconnects,
//     DEADLINE_EXCEEDED when a peer makes no progress for the group's
//     timeout, ABORTED after Abort(). After any failure the object is
//     broken: every later call fails at once with the same status, and the
//     owner builds a new group (new incarnation) after recovery.
//
//   std::unique_ptr<Collective> c = ...;   // TcpRingCollective, LocalCollectiveGroup
//   RETURN_IF_ERROR(c->Broadcast(weights.data(), weights.size(), /*root=*/0));
//   for (;;) {
//     ComputeGradients(&grads);
//     RETURN_IF_ERROR(c->AllReduceSum(grads.data(), grads.size()));  // then divide by size()
//   }
#ifndef PSRT_COMMON_COLLECTIVE_COLLECTIVE_H_
#define PSRT_COMMON_COLLECTIVE_COLLECTIVE_H_

#include <cstddef>

#include "absl/status/status.h"

namespace psrt {

// Sum-all-reduce in place over the group; every rank ends with bit-identical bytes.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `data[0..n)` elementwise across all ranks, in place. Every rank gets the
  // same bytes (each element reduced in one fixed order). Fails (never hangs) with
  // UNAVAILABLE when a peer is dead or disconnects, DEADLINE_EXCEEDED when a peer
  // makes no progress for `options.timeout` (e.g. a SIGSTOPped process), ABORTED
  // after Abort(). After any failure the object is broken: every later call fails
  // at once; the owner builds a new group.
  virtual absl::Status AllReduceSum(float* data, size_t n) = 0;
  // Copies rank `root`'s data[0..n) to every rank. INVALID_ARGUMENT (and the
  // object is not broken) when root is out of range.
  virtual absl::Status Broadcast(float* data, size_t n, int root) = 0;
  // Thread-safe, from any thread: makes an in-flight or later call fail with ABORTED promptly.
  virtual void Abort() = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_COLLECTIVE_COLLECTIVE_H_
