// A psrt checkpoint's optimizer as Keras 3 (3.15) saves a compiled model's:
// the `compile_config` of a .keras file's config.json and the datasets of
// its model.weights.h5's group optimizer/vars (keras/src/optimizers/
// base_optimizer.py save_own_variables: `store[str(i)] = variables[i]`):
//
//   0   iterations, int64 scalar: the variables' update count (Adam's t; the
//       checkpoint's step under SYNC or with one ASYNC worker)
//   1   learning_rate, float32 scalar (Keras keeps a constant rate as a
//       variable)
//   2.. the slots, in the order the optimizer's build() adds them, for the
//       model's trainable variables in layer order (kernel, bias):
//         SGD, momentum > 0:  momentum of each variable
//         Adam, AdamW:        momentum, velocity of the first variable, then
//                             of the second, ... (interleaved: one
//                             add_optimizer_variables call with two names)
//         RMSprop:            velocity of every variable, then momentum of
//                             every variable (momentum > 0), then
//                             average_gradient of every variable (centered)
//                             (one call per kind)
//
// Only where Keras' update is psrt's, so that training resumed in Keras
// continues the same run:
//   momentum (and Nesterov): Keras' SGD keeps m = -lr * psrt's accumulator
//     (m = momentum*m - lr*g; var += m), so the slot is scaled by -lr;
//   adam, adamw, rmsprop: the slots as they are (m -> momentum, v ->
//     velocity; RMSprop's names are Keras' own);
//   sgd: no slots.
// Refused, naming the optimizer and why: adagrad (psrt adds epsilon outside
// the square root, Keras inside), ftrl (not checked against Keras'
// Ftrl), and any learning-rate schedule (psrt
// evaluates it at the update's own 1-based count, Keras at the count
// before the update, so Keras would train at another rate).
#ifndef PSRT_CHIEF_EXPORT_FORMATS_KERAS_OPTIMIZER_H_
#define PSRT_CHIEF_EXPORT_FORMATS_KERAS_OPTIMIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/checkpoint_slots.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

struct KerasOptimizerState {
  std::string name;                 // the optimizer's Keras name ("adam"): optimizer/vars' attribute
  std::string compile_config_json;  // {"optimizer": {...}, "loss": {...}, "metrics": [...], ...}
  std::vector<Tensor> variables;    // optimizer/vars/0 .. n-1
};

// OK when the job's optimizer and loss can go to Keras; the refusals of
// KerasOptimizer otherwise. Reads no checkpoint: for refusing before one is
// read.
absl::Status CheckKerasOptimizer(const TrainingJob& job);

// The job's optimizer and `ckpt`'s state of it. FAILED_PRECONDITION naming
// the optimizer (or schedule, or loss) and why for one Keras cannot carry on
// exactly; FAILED_PRECONDITION when the variables' update counts differ
// (Keras has one count); NOT_FOUND naming a variable of the job's layers
// that `ckpt` lacks; errors of KerasLayers.
absl::StatusOr<KerasOptimizerState> KerasOptimizer(const TrainingJob& job, const CheckpointSlots& ckpt);

}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_KERAS_OPTIMIZER_H_
