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
//   ASSIGN_OR_RETURN(std::unique_ptr<StepRunner> runner, make_runner(a));
//   runner = MaybeClipGradients(std::move(runner), a.clip());
//
// Thread-compatible, as the runner it wraps: one Run at a time.
#ifndef PSRT_COMMON_COMPUTE_CLIPPING_STEP_RUNNER_H_
#define PSRT_COMMON_COMPUTE_CLIPPING_STEP_RUNNER_H_

#include <memory>

#include "absl/status/status.h"
#include "common/compute/step_runner.h"
#include "proto/job.pb.h"

namespace psrt {

// Clips a whole step's gradients in place: dense ones, and the rows of
// sparse ones (global_clipnorm: all of them together). Clipping off leaves
// `result` as it is. Fails (INVALID_ARGUMENT) for a gradient that is not
// float; `result` may then be partly clipped.
absl::Status ClipStepGradients(const GradientClipping& clip, StepResult* result);

// `runner` clipping its gradients as `clip` says, or `runner` itself when
// no clipping is set. `clip` must have passed CheckClipping.
std::unique_ptr<StepRunner> MaybeClipGradients(std::unique_ptr<StepRunner> runner, const GradientClipping& clip);

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_CLIPPING_STEP_RUNNER_H_
