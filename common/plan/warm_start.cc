#include "common/plan/warm_start.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "common/graph/model_compiler.h"
#include "common/status_macros.h"
#include "re2/re2.h"

namespace psrt {
namespace {

std::string Pattern(const WarmStartDef& w) { return w.vars_to_warm_start().empty() ? ".*" : w.vars_to_warm_start(); }

std::string Describe(const VariableDef& def) {
  std::vector<int64_t> dims(def.shape().dim().begin(), def.shape().dim().end());
  return absl::StrCat(DataTypeName(def.dtype()), "[", absl::StrJoin(dims, ","), "] (",
                      VariableDef::Kind_Name(def.kind()), ")");
}

}  // namespace

absl::Status CheckWarmStartFields(const TrainingJob& job) {
  if (!job.has_warm_start()) return absl::OkStatus();
  const WarmStartDef& w = job.warm_start();
  if (w.ckpt_to_initialize_from().empty()) {
    return absl::InvalidArgumentError(
        "warm_start.ckpt_to_initialize_from: empty; name the checkpoint directory of the job to start from");
  }
  RE2 re(Pattern(w), RE2::Quiet);
  if (!re.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("warm_start.vars_to_warm_start: \"", w.vars_to_warm_start(),
                                                   "\" is not an RE2 regular expression: ", re.error()));
  }
  for (const auto& [name, prev] : w.var_name_to_prev_var_name()) {
    if (name.empty() || prev.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("warm_start.var_name_to_prev_var_name: an empty name (\"", name, "\" -> \"", prev, "\")"));
    }
  }
  if (w.has_step() && w.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("warm_start.step: ", w.step(), " is negative (leave it unset for the newest checkpoint)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WarmStartValues> ReadWarmStart(const TrainingJob& job, const std::vector<VariableDef>& variables,
                                              const WarmStartLimits& limits) {
  RETURN_IF_ERROR(CheckWarmStartFields(job));
  if (!job.has_warm_start()) return absl::InvalidArgumentError("the job has no warm_start");
  const WarmStartDef& w = job.warm_start();
  const std::string& dir = w.ckpt_to_initialize_from();
  RE2 re(Pattern(w), RE2::Quiet);

  // What this job asks for, from its own model alone.
  std::vector<const VariableDef*> matched;
  std::set<std::string> matched_names;
  for (const VariableDef& v : variables) {
    if (!RE2::FullMatch(v.name(), re)) continue;
    if (v.kind() == VariableDef::HASH_TABLE) {
      return absl::InvalidArgumentError(
          absl::StrCat("warm_start: variable ", v.name(),
                       " is a hash table (input_dim 0), whose rows have no whole value to start from; leave it out of "
                       "vars_to_warm_start"));
    }
    matched.push_back(&v);
    matched_names.insert(v.name());
  }
  if (matched.empty()) {
    std::vector<std::string> names;
    for (const VariableDef& v : variables) names.push_back(v.name());
    return absl::InvalidArgumentError(absl::StrCat("warm_start.vars_to_warm_start: \"", Pattern(w),
                                                   "\" matches none of the job's variables (",
                                                   absl::StrJoin(names, ", "), ")"));
  }
  // In name order (a protobuf map's is unspecified), so the error is stable.
  const std::map<std::string, std::string> renames(w.var_name_to_prev_var_name().begin(),
                                                   w.var_name_to_prev_var_name().end());
  for (const auto& [name, prev] : renames) {
    if (!matched_names.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("warm_start.var_name_to_prev_var_name: ", name,
                                                     " is not a variable of the job that vars_to_warm_start \"",
                                                     Pattern(w), "\" matches"));
    }
  }

  // The source's model, from its manifest (bounded as a job file is)...
  int64_t step = -1;
  ASSIGN_OR_RETURN(TrainingJob source_job, RecordedJob(dir, w.has_step() ? w.step() : -1, &step));
  const std::string source = absl::StrCat("the checkpoint of step ", step, " in ", dir);
  if (source_job.model().sequential().layer_size() > limits.max_layers ||
      source_job.model().graph().node_size() > limits.max_graph_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("warm_start: ", source, " records a model of ", source_job.model().sequential().layer_size(),
                     " layers and ", source_job.model().graph().node_size(), " graph nodes, more than the bounds of ",
                     limits.max_layers, " and ", limits.max_graph_nodes));
  }
  absl::StatusOr<CompiledModel> source_model = CompileModel(source_job);
  if (!source_model.ok()) {
    return absl::Status(source_model.status().code(),
                        absl::StrCat("warm_start: the model ", source, " records: ", source_model.status().message()));
  }
  std::map<std::string, const VariableDef*> theirs;
  for (const VariableDef& v : source_model->variables) theirs[v.name()] = &v;

  // ... against which every matched variable is checked before a byte of a
  // tensor is read.
  WarmStartValues out;
  out.source = source;
  out.step = step;
  for (const VariableDef* v : matched) {
    auto renamed = renames.find(v->name());
    const std::string prev = renamed == renames.end() ? v->name() : renamed->second;
    const std::string as = prev == v->name() ? "" : absl::StrCat(" (as ", prev, ")");
    auto it = theirs.find(prev);
    if (it == theirs.end()) {
      std::vector<std::string> names;
      for (const auto& [name, def] : theirs) names.push_back(name);
      return absl::FailedPreconditionError(absl::StrCat("warm_start: variable ", v->name(), as, " is not in ", source,
                                                        " (it has ", absl::StrJoin(names, ", "), ")"));
    }
    const VariableDef& s = *it->second;
    if (s.kind() == VariableDef::HASH_TABLE) {
      return absl::FailedPreconditionError(absl::StrCat("warm_start: variable ", v->name(), as, ": ", source,
                                                        " holds it as a hash table, which has no whole value"));
    }
    if (s.kind() != v->kind() || s.dtype() != v->dtype() ||
        s.shape().SerializeAsString() != v->shape().SerializeAsString()) {
      std::string what = s.kind() != v->kind()     ? "another kind"
                         : s.dtype() != v->dtype() ? "another dtype"
                                                   : "another shape";
      return absl::FailedPreconditionError(absl::StrCat("warm_start: variable ", v->name(), " is ", Describe(*v),
                                                        " in this job, ", Describe(s), " in ", source, as, ": ", what));
    }
    out.source_name[v->name()] = prev;
  }

  // The values: every store of the source read and checked against the
  // model it records (checkpoint_variables), that very step.
  absl::StatusOr<CheckpointVariables> read = ReadCheckpointVariables(dir, step, source_job);
  if (!read.ok()) {
    return absl::Status(read.status().code(),
                        absl::StrCat("warm_start: reading ", source, ": ", read.status().message()));
  }
  for (const VariableDef* v : matched) {
    const std::string& prev = out.source_name[v->name()];
    auto value = read->values.find(prev);
    ASSIGN_OR_RETURN(TensorShape shape, TensorShape::FromProto(v->shape()));
    if (value == read->values.end() || value->second.dtype() != DT_FLOAT || value->second.shape() != shape) {
      return absl::DataLossError(
          absl::StrCat("warm_start: ", source, " did not give variable ", prev, " as ", Describe(*v)));
    }
    out.values[v->name()] = value->second;
  }
  return out;
}

void ApplyWarmStart(const WarmStartValues& warm, PlacementMap* placement) {
  for (VariablePlacement& vp : *placement->mutable_variable()) {
    auto it = warm.values.find(vp.variable().name());
    if (it == warm.values.end()) continue;
    InitializerDef* init = vp.mutable_variable()->mutable_initializer();
    init->Clear();
    init->set_kind(InitializerDef::TENSOR);
    it->second.ToProto(init->mutable_tensor());
  }
}

}  // namespace psrt
