#include "common/checkpoint/checkpoint_slots.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/graph/model_compiler.h"
#include "common/optimizer.h"
#include "common/snapshot/snapshot_store.h"
#include "common/status_macros.h"
#include "common/store/restore_assembly.h"

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

  std::map<std::string, const VariableDef*> by_name;
  for (const VariableDef& def : model.variables) by_name[def.name()] = &def;
  SnapshotReadOptions read_options;
  read_options.check_variable = [&by_name](const VariableDef& saved, DataType dtype, const TensorShape& value) {
    auto it = by_name.find(saved.name());
    if (it == by_name.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("variable ", saved.name(), " is not the job's (another model?)"));
    }
    return FitsVariable(*it->second, saved, dtype, value);
  };
  std::vector<PsSnapshot> sources;
  for (const CheckpointManifest::Shard& shard : manifest.shard()) {
    const std::string shard_dir = absl::StrCat(stores_dir.empty() ? dir : stores_dir, "/", shard.path());
    ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> snapshots, SnapshotStore::OpenReadOnly(shard_dir));
    absl::StatusOr<PsSnapshot> snap = snapshots->Read(manifest.step(), read_options);
    if (!snap.ok()) {
      if (absl::StartsWith(snap.status().message(), shard_dir)) return snap.status();
      return absl::Status(snap.status().code(), absl::StrCat(shard_dir, ": ", snap.status().message()));
    }
    sources.push_back(*std::move(snap));
  }
  std::vector<VariableDef> wanted;
  for (VariableDef def : model.variables) {
    if (def.kind() == VariableDef::HASH_TABLE) continue;
    def.set_row_begin(0);
    def.set_row_end(0);
    def.set_hash_shard(0);
    def.set_hash_shards(0);
    wanted.push_back(def);
  }
  ASSIGN_OR_RETURN(std::vector<VariableState> states, AssembleVariables(wanted, optimizer->num_slots(), sources));
  for (VariableState& s : states) {
    const std::string name = s.def.name();
    out.states[name] = std::move(s);
  }
  return out;
}

}  // namespace psrt
