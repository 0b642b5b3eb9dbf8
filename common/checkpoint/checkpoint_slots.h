// A committed checkpoint's optimizer state: each whole variable with its
// slots and its update count, for exporting the optimizer with the model
// (//chief:export --include_optimizer).
//
// ReadCheckpointVariables (checkpoint_variables.h) gives the values alone;
// this reads the same stores (ReadWholeStates, the same checks), keeping
// what it drops. The stores are opened read-only.
#ifndef PSRT_COMMON_CHECKPOINT_CHECKPOINT_SLOTS_H_
#define PSRT_COMMON_CHECKPOINT_CHECKPOINT_SLOTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/snapshot/variable_state.h"
#include "proto/job.pb.h"

namespace psrt {

struct CheckpointSlots {
  int64_t step = 0;
  // The job's optimizer's slot names, in the order of VariableState.slots
  // (Optimizer::slot_names: "m", "v" for Adam, ...).
  std::vector<std::string> slot_names;
  // Every variable of the job's model but hash tables, whole, with its
  // slots (none for a moving average) and `updates` (the count of updates
  // applied to it, Adam's t).
  std::map<std::string, VariableState> states;
};

// The checkpoint at `step` (>= 0, a committed one) of `dir` for `job`.
// Errors as ReadCheckpointVariables: NOT_FOUND for a step the directory has
// not committed, DATA_LOSS for a corrupt manifest or store or a variable
// the checkpoint lacks, FAILED_PRECONDITION for a variable of another shape
// or another optimizer's slots. `stores_dir` as there.
absl::StatusOr<CheckpointSlots> ReadCheckpointSlots(const std::string& dir, int64_t step, const TrainingJob& job,
                                                    const std::string& stores_dir = "");

}  // namespace psrt

#endif  // PSRT_COMMON_CHECKPOINT_CHECKPOINT_SLOTS_H_
