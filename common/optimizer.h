// Optimizer update rules, shared by the parameter server (server-side
// apply) and the in-process trainer, so both run the same arithmetic.
//
// Each rule updates n contiguous floats of a variable in place from a
// gradient, with its slots (per-element state such as Adam's moments) beside
// it. A dense variable is one call over all its elements; a sparse update is
// one call per touched row (lazy: untouched rows and their slots stay as
// they are). `t` is the 1-based count of updates of this variable, for
// Adam's bias correction.
//
// Equations follow TensorFlow/Keras (tf.keras.optimizers): SGD; Momentum
// (accum = m*accum + g; var -= lr*accum, or Nesterov var -= lr*(g + m*accum));
// Adagrad (accum += g^2; var -= lr*g/(sqrt(accum)+eps)); Adam (m, v moments,
// lr_t = lr*sqrt(1-b2^t)/(1-b1^t), var -= lr_t*m/(sqrt(v)+eps)); AdamW
// (Keras 3: var -= var*weight_decay*lr, then Adam's step); RMSprop (Keras 3:
// velocity = rho*velocity + (1-rho)*g^2, centered subtracts the square of a
// moving mean of g, var -= lr*g/sqrt(denominator + eps), optionally through
// a momentum slot); FTRL-proximal (TF's ApplyFtrl with l1, l2 and
// learning_rate_power). A sparse update decays only the rows it touches.
//
// Thread-compatible and stateless between calls: callers own the slots and
// the locking.
#ifndef PSRT_COMMON_OPTIMIZER_H_
#define PSRT_COMMON_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace psrt {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Refuses a missing optimizer, a non-positive learning rate and
  // out-of-range hyper-parameters, naming them.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerDef& def);

  virtual std::string name() const = 0;
  // Slot names, in order, Keras' where Keras has the rule: "momentum"; "m",
  // "v" (Adam, AdamW); "accumulator"; "velocity" then "momentum" (momentum > 0)
  // then "average_gradient" (centered) for RMSprop; "accumulator", "linear".
  virtual std::vector<std::string> slot_names() const = 0;
  int num_slots() const { return static_cast<int>(slot_names().size()); }
  // The value every element of slot i starts at.
  virtual float slot_initial_value(int i) const { return 0.0f; }

  // var[0..n) -= update(grad[0..n), slots[k][0..n)).
  virtual void Apply(float* var, const float* grad, int64_t n, float* const* slots,
                     int64_t t) const = 0;

  // The learning rate at update t (1-based): the configured one shaped by
  // the schedule (warm-up, then constant, step or cosine decay).
  //
  // t is the variable's own update count, not the global step a push
  // carries: under ASYNC pushes of different workers arrive out of step
  // order, so a step-driven rate would move back and forth, while the count
  // only rises; the store already keeps it (Adam's t) and saves and
  // restores it with every checkpoint; and every mirrored replica applies
  // the same all-reduced mean once a step, so their counts, rates and
  // values stay bit-identical. (A sparse table's rows share its count.)
  float LearningRate(int64_t t) const;

 private:
  float base_lr_ = 0;
  LearningRateSchedule schedule_;
};

// The job's optimizer with a STEP or COSINE schedule's decay_steps = 0
// replaced by `total_updates` (the whole run), as the PS applies it.
OptimizerDef ResolveSchedule(OptimizerDef def, int64_t total_updates);

}  // namespace psrt

#endif  // PSRT_COMMON_OPTIMIZER_H_
