#include "common/plan/early_stopping.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {
namespace {

EarlyStoppingDef::Mode ResolveMode(const EarlyStoppingDef& def) {
  if (def.mode() != EarlyStoppingDef::AUTO) return def.mode();
  // Keras' directions: the loss and the errors go down, the rest up.
  const std::string& m = def.monitor();
  return m == "loss" || m == "mae" || m == "mean_absolute_error" ? EarlyStoppingDef::MIN : EarlyStoppingDef::MAX;
}

}  // namespace

absl::Status CheckEarlyStopping(const TrainingJob& job) {
  const EarlyStoppingDef& e = job.eval().early_stopping();
  if (e.monitor().empty()) return absl::OkStatus();
  bool known = e.monitor() == "loss";
  for (const std::string& m : job.model().metric()) known = known || m == e.monitor();
  if (!known) {
    std::vector<std::string> names = {"\"loss\""};
    for (const std::string& m : job.model().metric()) names.push_back(absl::StrCat("\"", m, "\""));
    return absl::InvalidArgumentError(absl::StrCat("eval.early_stopping.monitor is \"", e.monitor(),
                                                   "\"; it must be one of ", absl::StrJoin(names, ", "),
                                                   " (\"loss\" or one of model.metric)"));
  }
  if (!(std::isfinite(e.min_delta()) && e.min_delta() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.early_stopping.min_delta is ", e.min_delta(), "; it must be finite and >= 0"));
  }
  if (e.patience() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("eval.early_stopping.patience is ", e.patience(), "; it must be >= 0"));
  }
  if (e.start_from_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.early_stopping.start_from_step is ", e.start_from_step(), "; it must be >= 0"));
  }
  if (!EarlyStoppingDef::Mode_IsValid(e.mode())) {
    return absl::InvalidArgumentError(absl::StrCat("eval.early_stopping.mode is ", e.mode(), "; want AUTO, MIN or MAX"));
  }
  if (job.eval().every_steps() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("eval.early_stopping needs periodic evaluations: eval.every_steps is ",
                                                   job.eval().every_steps(), "; set it > 0"));
  }
  return absl::OkStatus();
}

EarlyStopping::EarlyStopping(const EarlyStoppingDef& def) : def_(def), mode_(ResolveMode(def)) {}

bool EarlyStopping::IsImprovement(double value) const {
  if (!has_best_) return true;
  // Keras: monitor_op(value - min_delta, best), min_delta negated for MIN.
  const double delta = std::abs(static_cast<double>(def_.min_delta()));
  if (mode_ == EarlyStoppingDef::MIN) return value + delta < best_;
  return value - delta > best_;
}

bool EarlyStopping::Observe(int64_t step, double value) {
  if (step < def_.start_from_step()) return false;
  ++wait_;
  if (IsImprovement(value)) {
    best_ = value;
    has_best_ = true;
    wait_ = 0;
    return false;
  }
  return wait_ >= def_.patience();
}

std::string EarlyStopping::Why() const {
  return absl::StrCat(def_.monitor(), " did not improve by ", def_.min_delta(), " for ", wait_,
                      wait_ == 1 ? " evaluation" : " evaluations");
}

}  // namespace psrt
