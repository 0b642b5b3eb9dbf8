#include "common/checkpoint/checkpoint_variables.h"

#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/optimizer.h"
#include "common/snapshot/snapshot_store.h"
#include "common/status_macros.h"
#include "common/store/restore_assembly.h"

namespace psrt {

namespace {

// The manifest of checkpoint `step` in `dir` (the newest valid one when
// step < 0): the one RecordedJob and ReadCheckpointVariables both read.
absl::StatusOr<CheckpointManifest> SelectManifest(const std::string& dir, int64_t step) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint directory ", dir));
  }
  ManifestStore store(dir);
  std::vector<int64_t> steps = store.Steps();
  if (steps.empty()) return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", dir));
  CheckpointManifest manifest;
  if (step < 0) {
    std::vector<std::string> skipped;
    absl::StatusOr<CheckpointManifest> latest = store.LatestValid(&skipped);
    if (!latest.ok()) {
      return absl::Status(latest.status().code(), absl::StrCat(latest.status().message(), skipped.empty() ? "" : ": ",
                                                               absl::StrJoin(skipped, "; ")));
    }
    manifest = *std::move(latest);
  } else {
    if (std::find(steps.begin(), steps.end(), step) == steps.end()) {
      return absl::NotFoundError(absl::StrCat("no committed checkpoint at step ", step, " in ", dir, " (it has steps ",
                                              absl::StrJoin(steps, ", "), ")"));
    }
    ASSIGN_OR_RETURN(manifest, store.Read(step));
  }
  return manifest;
}

}  // namespace

absl::StatusOr<TrainingJob> RecordedJob(const std::string& dir, int64_t step, int64_t* found_step) {
  ASSIGN_OR_RETURN(CheckpointManifest manifest, SelectManifest(dir, step));
  if (found_step != nullptr) *found_step = manifest.step();
  if (!manifest.has_job()) {
    return absl::NotFoundError(absl::StrCat("the checkpoint of step ", manifest.step(), " in ", dir,
                                            " does not record its job (written before checkpoints did): give --job"));
  }
  return manifest.job();
}

absl::StatusOr<std::vector<VariableState>> ReadWholeStates(const std::string& dir, const std::string& stores_dir,
                                                           const CheckpointManifest& manifest,
                                                           const CompiledModel& model, int num_slots,
                                                           bool hash_tables) {
  // Every piece the stores name is checked against the job's variable
  // before it is allocated: a file cannot make this reader ask for more
  // than the model's own size (hash tables: the file's).
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
    // ManifestStore::Read refused a path leaving the directory.
    const std::string shard_dir = absl::StrCat(stores_dir.empty() ? dir : stores_dir, "/", shard.path());
    ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> snapshots, SnapshotStore::OpenReadOnly(shard_dir));
    absl::StatusOr<PsSnapshot> snap = snapshots->Read(manifest.step(), read_options);
    if (!snap.ok()) {
      // The store's errors may already name its directory.
      if (absl::StartsWith(snap.status().message(), shard_dir)) return snap.status();
      return absl::Status(snap.status().code(), absl::StrCat(shard_dir, ": ", snap.status().message()));
    }
    sources.push_back(*std::move(snap));
  }
  // Whole variables: the job's definitions with no row range; hash tables
  // as one shard of one (every id).
  std::vector<VariableDef> wanted;
  for (VariableDef def : model.variables) {
    if (!hash_tables && def.kind() == VariableDef::HASH_TABLE) continue;
    def.set_row_begin(0);
    def.set_row_end(0);
    def.set_hash_shard(0);
    def.set_hash_shards(0);
    wanted.push_back(def);
  }
  return AssembleVariables(wanted, num_slots, sources);
}

absl::StatusOr<CheckpointVariables> ReadCheckpointVariables(const std::string& dir, int64_t step,
                                                            const TrainingJob& job, const std::string& stores_dir) {
  ASSIGN_OR_RETURN(CheckpointManifest manifest, SelectManifest(dir, step));
  CheckpointVariables out;
  out.step = manifest.step();
  out.job_name = manifest.job_name();
  ASSIGN_OR_RETURN(out.model, CompileModel(job));
  // Only the slot count matters here; the schedule (whose decay steps the
  // chief fills in from the run's length) does not change it.
  OptimizerDef optimizer_def = job.optimizer();
  optimizer_def.clear_schedule();
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(optimizer_def));

  ASSIGN_OR_RETURN(std::vector<VariableState> states,
                   ReadWholeStates(dir, stores_dir, manifest, out.model, optimizer->num_slots(), /*hash_tables=*/true));
  for (VariableState& s : states) {
    if (s.def.kind() == VariableDef::HASH_TABLE) {
      out.hash_tables[s.def.name()] = std::move(s);
    } else {
      out.values[s.def.name()] = std::move(s.value);
    }
  }
  return out;
}

}  // namespace psrt
