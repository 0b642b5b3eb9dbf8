// The optimizer updates of one push, applied on a WorkPool: the variables
// of a coalesced push in parallel, each large one also in row ranges
// (Variable::ApplyDense/ApplyRows with the pool). A push of fewer than
// kMinParallelElements floats in all stays on the calling thread, as does
// one naming a variable twice (its two updates keep their order).
//
// The caller has validated the push and decided it applies (exactly-once
// and ordering are the caller's: nothing here records or skips anything);
// each variable takes its own writer lock as in a serial apply.
#ifndef PSRT_COMMON_STORE_PARALLEL_APPLY_H_
#define PSRT_COMMON_STORE_PARALLEL_APPLY_H_

#include <vector>

#include "absl/status/status.h"
#include "common/store/variable.h"
#include "common/tensor.h"
#include "common/transport/ps_types.h"
#include "common/work_pool.h"

namespace psrt {

// Fewest floats a push needs for its variables to be applied in parallel
// (the MLP example's six variables are 235K).
inline constexpr int64_t kMinParallelElements = int64_t{1} << 16;

// grads[i] to vars[i] for every i. Returns the first error; every other
// update still runs (a validated push fails for none).
absl::Status ApplyDenseAll(WorkPool* pool, const std::vector<Variable*>& vars,
                           const std::vector<const Tensor*>& grads);

// rows[i] to vars[i] for every i, as ApplyDenseAll.
absl::Status ApplyRowsAll(WorkPool* pool, const std::vector<Variable*>& vars,
                          const std::vector<SparseUpdate>& rows);

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PARALLEL_APPLY_H_
