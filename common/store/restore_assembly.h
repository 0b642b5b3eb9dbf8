// Restoring a checkpoint taken with another layout: another strategy (a PS
// checkpoint restored into mirrored replicas, or back) or another number of
// stores. Each variable this store holds (whole, or rows [row_begin,
// row_end) of it) is assembled from the pieces of the same variable in the
// checkpoint's snapshots, whichever store wrote them: rows of values and of
// every optimizer slot are copied where the pieces overlap ours, the first
// piece to cover a row wins (replicas hold the same rows several times).
// A hash table is re-sharded by id: this store takes, from every piece,
// the rows whose id routes to its shard (VariableDef.hash_shard of
// hash_shards), each id once, with its optimizer slots.
#ifndef PSRT_COMMON_STORE_RESTORE_ASSEMBLY_H_
#define PSRT_COMMON_STORE_RESTORE_ASSEMBLY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/snapshot/snapshot_store.h"
#include "proto/ps_service.pb.h"

namespace psrt {

// One VariableState per entry of `wanted`, in order. DATA_LOSS naming the
// variable and the rows no piece covers (a variable no piece has at all is
// said to be missing, another model's checkpoint); FAILED_PRECONDITION for a piece
// whose shape, dtype or slot count does not fit (another model or
// optimizer). Each variable has `optimizer_slots` slots, or none for a
// moving average (SlotsOf). `sources` are read, not changed.
absl::StatusOr<std::vector<VariableState>> AssembleVariables(const std::vector<VariableDef>& wanted,
                                                             int optimizer_slots,
                                                             const std::vector<PsSnapshot>& sources);

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_RESTORE_ASSEMBLY_H_
