// PushParts: the parts (buckets, RequestId.bucket) of workers' steps a PS
// has taken, so that each part is applied once and a worker's step counts
// (SYNC aggregation, staleness, the global step) only when every part of it
// is in. A step is keyed by (worker, incarnation, step); a complete step
// leaves here (the PS records it as a whole push from then on).
//
//   RETURN_IF_ERROR(PushParts::Check(id));      // at the edge, before anything
//   if (parts.Seen(id)) return duplicate;
//   ASSIGN_OR_RETURN(bool whole, parts.Take(id));  // true: the step is complete
//
// Bounded: per worker at most kOpenSteps incomplete steps are kept (an
// older one, abandoned by a worker that moved on, is forgotten), and a new
// incarnation of a worker forgets its predecessor's.
//
// Thread-compatible: the PS calls it under its consistency lock.
#ifndef PSRT_COMMON_STORE_PUSH_PARTS_H_
#define PSRT_COMMON_STORE_PUSH_PARTS_H_

#include <cstdint>
#include <map>
#include <set>

#include "absl/status/statusor.h"
#include "common/transport/ps_types.h"
#include "proto/ps_service.pb.h"

namespace psrt {

class PushParts {
 public:
  static constexpr size_t kOpenSteps = 64;

  // INVALID_ARGUMENT naming the field when id's bucket fields are malformed:
  // a negative bucket or one over kMaxPushBuckets, or last_bucket on a
  // whole-step push (bucket 0).
  static absl::Status Check(const RequestId& id);

  // Whether this part of a bucketed push was taken before (false for a
  // whole-step push: the PS's own record answers for those).
  bool Seen(const RequestId& id) const;

  // Records a part (REQUIRES: Check(id) is OK and !Seen(id)); whether the
  // step is now complete. A whole-step push (bucket 0) is complete at once
  // and leaves nothing here. INVALID_ARGUMENT, with nothing recorded, when
  // the part contradicts the step's others: a second last part of another
  // number, a part numbered past the last, or a last part below a part
  // already taken.
  // With `hold` (SYNC, where a step's gradients are summed): an incomplete
  // step keeps the part's gradients (moved out of *hold, which the caller
  // must own), and the part completing it gets every part's in *hold, so
  // that the caller sums them then. The parts of a worker that never
  // completes its step (it died mid-step; a new incarnation pushes the step
  // again) are never summed.
  absl::StatusOr<bool> Take(const RequestId& id, NamedTensors* hold = nullptr);

  // Forgets everything (a restore or a new generation: the same steps will
  // be pushed again).
  void Clear() { workers_.clear(); }

 private:
  struct Step {
    std::set<int> taken;
    int last = 0;  // 0 until the last part is in
    NamedTensors held;  // the parts' gradients, with Take's `hold`
  };
  struct Worker {
    uint64_t incarnation = 0;
    std::map<int64_t, Step> steps;  // incomplete steps only
  };
  std::map<int, Worker> workers_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PUSH_PARTS_H_
