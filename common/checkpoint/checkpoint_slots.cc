#include "common/checkpoint/checkpoint_slots.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "common/graph/model_compiler.h"
#include "common/optimizer.h"
#include "common/status_macros.h"

namespace psrt {

absl::StatusOr<CheckpointSlots> ReadCheckpointSlots(const std::string& dir, int64_t step, const TrainingJob& job,
                                                    const std::string& stores_dir) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("ReadCheckpointSlots: step ", step, " < 0"));
  ManifestStore manifests(dir);
  ASSIGN_OR_RETURN(CheckpointManifest manifest, manifests.Read(step));
  ASSIGN_OR_RETURN(CompiledModel model, CompileModel(job));
  OptimizerDef optimizer_def = job.optimizer();
  optimizer_def.clear_schedule();  // the slots do not depend on it
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(optimizer_def));
  CheckpointSlots out;
  out.step = manifest.step();
  out.slot_names = optimizer->slot_names();

  ASSIGN_OR_RETURN(std::vector<VariableState> states,
                   ReadWholeStates(dir, stores_dir, manifest, model, optimizer->num_slots(), /*hash_tables=*/false));
  for (VariableState& s : states) {
    const std::string name = s.def.name();
    out.states[name] = std::move(s);
  }
  return out;
}

}  // namespace psrt
