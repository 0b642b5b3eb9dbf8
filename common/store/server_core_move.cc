// Moving variables between parameter servers while the job runs (issue
// #14): the chief copies a variable's whole state out of its owner, loads
// it into the PS that takes it over, and once the placement switched (a
// new generation on every PS) has the old owner forget it. A copy is of
// one variable at a time under its own lock, so pushes go on meanwhile;
// the chief copies again at a step boundary with the workers paused, and
// only that copy is the one the new owner goes on from.
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/store/server_core.h"
#include "glog/logging.h"

namespace psrt {
namespace {

constexpr int kMaxNames = 100000;

void ToProto(const VariableState& st, VariableStateProto* out) {
  *out->mutable_def() = st.def;
  st.value.ToProto(out->mutable_value());
  for (const Tensor& s : st.slots) s.ToProto(out->add_slot());
  if (st.def.kind() == VariableDef::HASH_TABLE) st.ids.ToProto(out->mutable_ids());
  out->set_updates(st.updates);
}

absl::StatusOr<VariableState> FromProto(const VariableStateProto& p) {
  VariableState st;
  st.def = p.def();
  ASSIGN_OR_RETURN(st.value, Tensor::FromProto(p.value()));
  for (const TensorProto& s : p.slot()) {
    ASSIGN_OR_RETURN(Tensor t, Tensor::FromProto(s));
    st.slots.push_back(std::move(t));
  }
  if (p.def().kind() == VariableDef::HASH_TABLE) {
    ASSIGN_OR_RETURN(st.ids, Tensor::FromProto(p.ids()));
  }
  if (p.updates() < 0) return absl::InvalidArgumentError(absl::StrCat("updates ", p.updates(), " < 0"));
  st.updates = p.updates();
  return st;
}

// Names of one list: bounded, each once.
absl::Status CheckNames(const google::protobuf::RepeatedPtrField<std::string>& names, absl::string_view field) {
  if (names.size() > kMaxNames) {
    return absl::InvalidArgumentError(absl::StrCat("move: ", names.size(), " names in `", field, "`, at most ", kMaxNames));
  }
  std::set<std::string> seen;
  for (const std::string& n : names) {
    if (!seen.insert(n).second) {
      return absl::InvalidArgumentError(absl::StrCat("move: variable \"", absl::CEscape(n.substr(0, 128)),
                                                     "\" listed twice in `", field, "`"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MoveVariablesResponse> ParameterServerCore::MoveVariables(const MoveVariablesRequest& req) {
  RETURN_IF_ERROR(CheckNames(req.copy(), "copy"));
  RETURN_IF_ERROR(CheckNames(req.drop(), "drop"));
  if (req.load_size() > kMaxNames) {
    return absl::InvalidArgumentError(absl::StrCat("move: ", req.load_size(), " loads, at most ", kMaxNames));
  }
  // Every load decoded before the lock: nothing here changes yet.
  std::vector<VariableState> imports;
  std::set<std::string> imported;
  for (const VariableStateProto& p : req.load()) {
    const std::string& name = p.def().name();
    if (!imported.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("move: variable \"", absl::CEscape(name.substr(0, 128)), "\" loaded twice"));
    }
    absl::StatusOr<VariableState> st = FromProto(p);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("move: load of \"", absl::CEscape(name.substr(0, 128)), "\": ", st.status().message()));
    }
    imports.push_back(*std::move(st));
  }
  MoveVariablesResponse resp;
  int64_t bytes = 0;
  // Copies the exports; REQUIRES mu_ held (shared at least).
  auto copy_out = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
    std::vector<Variable*> sources;
    for (const std::string& name : req.copy()) {
      ASSIGN_OR_RETURN(Variable * v, Find(name));
      sources.push_back(v);
    }
    for (Variable* v : sources) {
      ToProto(v->CopyState(), resp.add_state());
      bytes += v->bytes();
    }
    return absl::OkStatus();
  };
  if (imports.empty() && req.drop_size() == 0) {
    // A copy only: pushes go on meanwhile (each variable copied under its
    // own lock, whole between two pushes).
    absl::ReaderMutexLock lock(&mu_);
    if (req.generation() != 0) RETURN_IF_ERROR(CheckGenerationLocked(req.generation(), "move"));
    RETURN_IF_ERROR(copy_out());
    resp.set_bytes(bytes);
    return resp;
  }
  {
    absl::MutexLock lock(&mu_);
    if (req.generation() != 0) RETURN_IF_ERROR(CheckGenerationLocked(req.generation(), "move"));
    // Checks first, all of them: all or nothing.
    std::vector<Variable*> targets;
    for (const VariableState& st : imports) {
      ASSIGN_OR_RETURN(Variable * v, Find(st.def.name()));
      RETURN_IF_ERROR(v->SameAs(st.def));
      RETURN_IF_ERROR(v->CheckState(st));
      targets.push_back(v);
    }
    for (const std::string& name : req.copy()) RETURN_IF_ERROR(Find(name).status());
    for (size_t i = 0; i < imports.size(); ++i) {
      RETURN_IF_ERROR(targets[i]->LoadState(imports[i]));  // checked above
      bytes += targets[i]->bytes();
    }
    RETURN_IF_ERROR(copy_out());
    // A drop of a variable not held is not an error: the chief's retry of
    // a drop whose answer it lost.
    int dropped = 0;
    for (const std::string& name : req.drop()) dropped += static_cast<int>(variables_.erase(name));
    if (!imports.empty() || dropped > 0) chain_ = DeltaChain();  // no base for a delta
    if (dropped > 0) LOG(INFO) << "moved away: " << dropped << " variables (" << variables_.size() << " left)";
    if (!imports.empty()) LOG(INFO) << "moved in: the state of " << imports.size() << " variables";
  }
  resp.set_bytes(bytes);
  return resp;
}

bool ParameterServerCore::WaitHoldsNone(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return variables_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

}  // namespace psrt
