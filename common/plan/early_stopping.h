// EarlyStopping: Keras' EarlyStopping callback (keras/src/callbacks/
// early_stopping.py, monitor_callback.py) as a pure rule over the periodic
// evaluations of a job (EvalDef.early_stopping). No I/O, no clock: the
// chief feeds it each evaluation's value and acts on its answer.
//
// Keras' semantics, evaluation for epoch:
//   - an evaluation before start_from_step does not count (not seen);
//   - wait += 1;
//   - an improvement (the first value; MIN: value < best - min_delta;
//     MAX: value > best + min_delta) sets best = value, wait = 0;
//   - otherwise wait >= patience stops the run.
// So patience 0 and 1 both stop at the first evaluation without
// improvement after the first one, as in Keras. A NaN value is never an
// improvement (a first NaN becomes `best`, and nothing beats it: Keras too).
// Keras' baseline and restore_best_weights are not part of the contract.
//
// One thread's (the chief's watch loop). Example:
//   EarlyStopping rule(job.eval().early_stopping());
//   if (rule.Observe(step, metrics["accuracy"])) { ... end the run ... }
#ifndef PSRT_COMMON_PLAN_EARLY_STOPPING_H_
#define PSRT_COMMON_PLAN_EARLY_STOPPING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/job.pb.h"

namespace psrt {

// Whether `def` is a valid rule for `job` (its model's metrics, its
// eval.every_steps); INVALID_ARGUMENT naming the field otherwise. An empty
// monitor (no early stopping) is valid whatever the rest says.
absl::Status CheckEarlyStopping(const TrainingJob& job);

class EarlyStopping {
 public:
  // REQUIRES: def passed CheckEarlyStopping (monitor non-empty).
  explicit EarlyStopping(const EarlyStoppingDef& def);

  // Feeds the evaluation at `step`; true when the run is to stop here.
  bool Observe(int64_t step, double value);

  // MIN (lower is better) or MAX, AUTO resolved: MIN for "loss".
  EarlyStoppingDef::Mode mode() const { return mode_; }
  const std::string& monitor() const { return def_.monitor(); }
  bool has_best() const { return has_best_; }
  double best() const { return best_; }
  int64_t wait() const { return wait_; }
  // "accuracy did not improve by 0.001 for 2 evaluations"
  std::string Why() const;

 private:
  bool IsImprovement(double value) const;

  const EarlyStoppingDef def_;
  const EarlyStoppingDef::Mode mode_;
  bool has_best_ = false;
  double best_ = 0;
  int64_t wait_ = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_PLAN_EARLY_STOPPING_H_
