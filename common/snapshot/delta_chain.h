// Incremental checkpoints: a delta snapshot holds, for each embedding
// table (hash or fixed), only the rows touched since its base snapshot
// (VariableState.delta; a fixed table's ids are its row numbers); this
// puts a base and a delta back together into the whole state of the delta's
// step. SnapshotStore::Read applies a chain of them, oldest first.
#ifndef PSRT_COMMON_SNAPSHOT_DELTA_CHAIN_H_
#define PSRT_COMMON_SNAPSHOT_DELTA_CHAIN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/snapshot/variable_state.h"

namespace psrt {

// The variables of the delta's step: each variable of `delta` in its order,
// whole ones as they are, delta ones merged into the same variable of
// `base` (rows of ids already there replaced, new ids appended after the
// base's rows). Variables of `base` that `delta` lacks are dropped (a delta
// names every variable its snapshot holds). Both come from files: anything
// inconsistent (a delta variable the base lacks or holds whole with another
// kind, dim or slot count; shapes or dtypes that disagree; an id twice) is
// DATA_LOSS naming `where`, the variable and what was wrong.
absl::StatusOr<std::vector<VariableState>> ApplyDelta(std::vector<VariableState> base,
                                                      std::vector<VariableState> delta,
                                                      const std::string& where);

}  // namespace psrt

#endif  // PSRT_COMMON_SNAPSHOT_DELTA_CHAIN_H_
