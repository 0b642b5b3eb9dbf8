// One variable's state as a snapshot holds it: what the PS copies in memory
// at a checkpoint and what a restore puts back.
#ifndef PSRT_COMMON_SNAPSHOT_VARIABLE_STATE_H_
#define PSRT_COMMON_SNAPSHOT_VARIABLE_STATE_H_

#include <cstdint>
#include <vector>

#include "common/tensor.h"
#include "proto/ps_service.pb.h"

namespace psrt {

// Everything a snapshot needs of one variable: a deep copy.
struct VariableState {
  VariableDef def;
  Tensor value;               // DENSE, FIXED_TABLE: [rows, ...]; HASH_TABLE: [n, dim]
  std::vector<Tensor> slots;  // same shape as value
  Tensor ids;                 // HASH_TABLE: int64 [n], the id of each row
  int64_t updates = 0;        // for Adam's bias correction
  // A table of a delta snapshot: value, slots and ids hold only the rows
  // touched since the base snapshot ([k, dim], [k]; a FIXED_TABLE's ids are
  // its row numbers).
  bool delta = false;
};

// The optimizer slots a variable has (and its snapshot holds): the
// optimizer's, or none for a moving-average variable
// (VariableDef.moving_average), which the store assigns instead of training.
inline int SlotsOf(const VariableDef& def, int optimizer_slots) {
  return def.has_moving_average() ? 0 : optimizer_slots;
}

}  // namespace psrt

#endif  // PSRT_COMMON_SNAPSHOT_VARIABLE_STATE_H_
