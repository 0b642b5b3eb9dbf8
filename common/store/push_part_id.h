// Tests' request ids of one part of a bucketed push (RequestId.bucket).
#ifndef PSRT_COMMON_STORE_PUSH_PART_ID_H_
#define PSRT_COMMON_STORE_PUSH_PART_ID_H_

#include <cstdint>

#include "proto/ps_service.pb.h"

namespace psrt {

// Part `bucket` (0: the whole step) of `worker`'s push of `step`.
inline RequestId PartId(int worker, uint64_t incarnation, int64_t step, int bucket, bool last) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(incarnation);
  id.set_step(step);
  id.set_bucket(bucket);
  id.set_last_bucket(last);
  return id;
}

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PUSH_PART_ID_H_
