// Keras' gradient clipping (OptimizerDef.clipnorm, clipvalue and
// global_clipnorm, issue #25) as functions of tensors, with the same
// arithmetic as TensorFlow's:
//
//   ClipByNorm(t, c)        tf.clip_by_norm(t, c): t * c / max(||t||, c)
//   ClipByValue(t, c)       tf.clip_by_value(t, -c, c)
//   ClipByGlobalNorm(ts, c) tf.clip_by_global_norm(ts, c): every tensor
//                           times c * min(1 / g, 1 / c), g the L2 norm of
//                           all of them together; NaN everywhere if g is
//                           not finite (as TensorFlow)
//
// A sparse gradient (ids, rows) is clipped as its rows, as TensorFlow clips
// an IndexedSlices by its values (the ids are unique, so the rows are the
// dense gradient's non-zero rows). Sums of squares accumulate in double.
// A tensor within its bound is returned as it is (sharing its buffer, no
// copy): TensorFlow's t * c / c differs from t by at most one rounding.
// Anything clipped is a new tensor; the input is never written.
//
// The worker applies these to each step's gradients through
// ClippingStepRunner (clipping_step_runner.h); the planner and the worker's
// assignment validator check the values with CheckClipping.
#ifndef PSRT_COMMON_COMPUTE_GRADIENT_CLIPPING_H_
#define PSRT_COMMON_COMPUTE_GRADIENT_CLIPPING_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

// The optimizer's three clipping fields, as WorkerAssignment.clip carries
// them (the chief's and the planner's assignments both copy them so).
GradientClipping ClippingOf(const OptimizerDef& optimizer);

// Whether any of the three is set (non-zero).
bool ClippingEnabled(const GradientClipping& clip);

// Each value finite and >= 0, at most one of them non-zero. Errors are
// INVALID_ARGUMENT naming the field under `prefix` ("optimizer.clipnorm:
// ...", "assignment.clip.clipvalue: ...").
absl::Status CheckClipping(const GradientClipping& clip, absl::string_view prefix);

// The sum of the squares of a float tensor's elements.
absl::StatusOr<double> SquaredNorm(const Tensor& t);

// tf.clip_by_norm(t, clip_norm) of a float tensor (clip_norm > 0).
absl::StatusOr<Tensor> ClipByNorm(const Tensor& t, float clip_norm);

// tf.clip_by_value(t, -clip_value, clip_value) of a float tensor.
absl::StatusOr<Tensor> ClipByValue(const Tensor& t, float clip_value);

// The factor tf.clip_by_global_norm scales every tensor by for a global norm
// `global_norm`: 1 within the bound, clip_norm / global_norm past it, NaN
// for a norm that is not finite.
float GlobalNormScale(double global_norm, float clip_norm);

// `t` times `scale` (a float tensor; `t` itself for a scale of exactly 1).
absl::StatusOr<Tensor> ScaleTensor(const Tensor& t, float scale);

// tf.clip_by_global_norm(*tensors, clip_norm): replaces each tensor by its
// clipped value. Returns the global norm (of the tensors as given).
absl::StatusOr<double> ClipByGlobalNorm(const std::vector<Tensor*>& tensors, float clip_norm);

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_GRADIENT_CLIPPING_H_
