// ClippingStepRunner: a StepRunner decorator that clips every step's
// gradients as the assignment's `clip` says (Keras' clipnorm, clipvalue or
// global_clipnorm; gradient_clipping.h has the arithmetic), so each worker
// clips its own step's gradients before they are pushed to the PS or
// all-reduced with the other workers, whatever the strategy: the worker
// wraps whatever runner it built (one device's GraphStepRunner, or the
// MirroredDevicesRunner of mirrored{devices}, whose devices reduce locally
// first, so what is clipped there is the worker's gradient of its whole
// batch).
//
// The bucketed push (RunStreaming, issue #13) keeps streaming under
// clipnorm and clipvalue: each dense gradient is clipped as the backward
// pass hands it over, and goes on at once. global_clipnorm needs every
// gradient of the step (dense and sparse) before it can scale any: under it
// RunStreaming holds what the backward pass hands over and releases it all,
// scaled, in the order it came, once the step's compute is done.
//
// Clipping off costs nothing: MaybeClipGradients returns the runner as it
// is, with no wrapper.
//
// A moving-average variable's "gradient" (VariableDef.moving_average: a
// batch statistic the store assigns from) is no gradient: it is neither
// clipped nor counted in the global norm (Keras' optimizers clip only the
// trainable variables' gradients).
//
//   ASSIGN_OR_RETURN(std::unique_ptr<StepRunner> runner, make_runner(a));
//   runner = MaybeClipGradients(std::move(runner), a);
//
// Thread-compatible, as the runner it wraps: one Run at a time.
#ifndef PSRT_COMMON_COMPUTE_CLIPPING_STEP_RUNNER_H_
#define PSRT_COMMON_COMPUTE_CLIPPING_STEP_RUNNER_H_

#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "common/compute/step_runner.h"
#include "proto/job.pb.h"
#include "proto/worker_service.pb.h"

namespace psrt {

// Clips a whole step's gradients in place: dense ones, and the rows of
// sparse ones (global_clipnorm: all of them together). Clipping off leaves
// `result` as it is. Fails (INVALID_ARGUMENT) for a gradient that is not
// float; `result` may then be partly clipped. The dense values of the
// variables in `unclipped` are left as they are and out of the global norm.
absl::Status ClipStepGradients(const GradientClipping& clip, StepResult* result,
                               const std::set<std::string>& unclipped = {});

// `runner` clipping its gradients as `clip` says (but for `unclipped`'s),
// or `runner` itself when no clipping is set. `clip` must have passed
// CheckClipping.
std::unique_ptr<StepRunner> MaybeClipGradients(std::unique_ptr<StepRunner> runner, const GradientClipping& clip,
                                               std::set<std::string> unclipped = {});

// As above with the assignment's clip, leaving its moving-average
// variables' values unclipped.
std::unique_ptr<StepRunner> MaybeClipGradients(std::unique_ptr<StepRunner> runner, const WorkerAssignment& a);

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_CLIPPING_STEP_RUNNER_H_
