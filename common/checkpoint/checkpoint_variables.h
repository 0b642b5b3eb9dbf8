// Reads a committed checkpoint back into whole variables, for export
// (//chief:export) and for the evaluator (//worker:evaluator).
//
// A checkpoint is the chief's manifest (DIR/checkpoint-S.manifest) and the
// snapshot stores it names (one per PS, or per mirrored replica), each
// holding rows of some variables; restore_assembly puts every variable the
// job's model declares back together, whatever the layout it was taken
// with. The stores are opened read-only: exporting changes no file.
#ifndef PSRT_COMMON_CHECKPOINT_CHECKPOINT_VARIABLES_H_
#define PSRT_COMMON_CHECKPOINT_CHECKPOINT_VARIABLES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/graph/model_compiler.h"
#include "common/snapshot/variable_state.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

struct CheckpointVariables {
  int64_t step = 0;
  std::string job_name;                  // as the manifest recorded it
  CompiledModel model;                   // the job's model, compiled
  std::map<std::string, Tensor> values;  // every model variable but hash tables, whole
  // Hash tables, every id of every store in one state (value [n, dim] and
  // ids [n]): a table has no whole tensor, only the rows training made.
  std::map<std::string, VariableState> hash_tables;
};

// The job that wrote that checkpoint (CheckpointManifest.job); NOT_FOUND,
// saying so, for a checkpoint written before manifests recorded it. Sets
// *found_step (when given) to the step of the manifest it read, so that a
// caller reads that checkpoint and not a newer one committed meanwhile.
absl::StatusOr<TrainingJob> RecordedJob(const std::string& dir, int64_t step, int64_t* found_step = nullptr);

// The checkpoint at `step` of `dir` (step < 0: the newest one that
// verifies) for `job`'s model. NOT_FOUND naming the directory when it is
// missing or holds no committed checkpoint, and naming the steps it has for
// an unknown step; DATA_LOSS for a corrupt manifest or store, or a model
// variable the checkpoint lacks; FAILED_PRECONDITION when it holds a
// variable with another shape or another optimizer's slots (another job).
// `stores_dir` is where the manifest's stores are (shard paths are relative
// to it); empty: `dir` itself, where the chief and PS put them when the
// daemons' --snapshot_dir is the directory above the checkpoint directory.
absl::StatusOr<CheckpointVariables> ReadCheckpointVariables(const std::string& dir, int64_t step,
                                                            const TrainingJob& job, const std::string& stores_dir = "");

// The stores' part of ReadCheckpointVariables, for readers that keep more
// of each variable (checkpoint_slots.h): every variable of `model` (but
// hash tables unless `hash_tables`) whole, with its `num_slots` slots and
// update count, from the stores `manifest` names (under `stores_dir`, or
// `dir`). Every piece is checked against the model's variable before it
// is allocated; errors as ReadCheckpointVariables.
absl::StatusOr<std::vector<VariableState>> ReadWholeStates(const std::string& dir, const std::string& stores_dir,
                                                           const CheckpointManifest& manifest,
                                                           const CompiledModel& model, int num_slots, bool hash_tables);

}  // namespace psrt

#endif  // PSRT_COMMON_CHECKPOINT_CHECKPOINT_VARIABLES_H_
