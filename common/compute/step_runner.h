// One training step's compute, as an interface: the graph runner
// (graph_step_runner.h) implements it; the worker's loop and its unit tests
// (with fakes) call it.
#ifndef PSRT_COMMON_COMPUTE_STEP_RUNNER_H_
#define PSRT_COMMON_COMPUTE_STEP_RUNNER_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/input/example.h"
#include "common/tensor.h"
#include "common/transport/parameter_client.h"

namespace psrt {

struct StepResult {
  float loss = 0;
  TensorMap dense_gradients;
  // variable -> (unique ids [n], gradient rows [n, dim])
  std::map<std::string, std::pair<Tensor, Tensor>> sparse_gradients;
  std::map<std::string, float> metrics;
};

// One training step's compute on this worker's device.
class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual std::vector<std::string> DenseVariables() const = 0;
  // The rows of sparse variables this batch reads (unique ids per variable).
  virtual absl::StatusOr<RowRequest> SparseRows(const Batch& batch) const = 0;
  // Forward and backward. `dense` holds every DenseVariables() tensor;
  // `rows` the pulled rows of SparseRows(batch). `step` seeds the step's
  // randomness (dropout), so a step recomputed after a restore is the same.
  virtual absl::StatusOr<StepResult> Run(const TensorMap& dense, const TensorMap& rows,
                                         const Batch& batch, int64_t step) = 0;
  // A dense gradient the backward pass has finished, handed over while
  // the step goes on (bucketed push, issue #13).
  using GradientReady = std::function<void(const std::string& variable, const Tensor& gradient)>;
  // Run that hands each dense gradient to `ready` as soon as it is final,
  // on the calling thread, in the order the backward pass makes them (the
  // last layers' first); those are left out of the result's
  // dense_gradients. Sparse gradients come in the result as from Run. This
  // default hands them over after Run.
  virtual absl::StatusOr<StepResult> RunStreaming(const TensorMap& dense, const TensorMap& rows,
                                                  const Batch& batch, int64_t step, const GradientReady& ready) {
    absl::StatusOr<StepResult> r = Run(dense, rows, batch, step);
    if (r.ok()) {
      for (const auto& [v, g] : r->dense_gradients) ready(v, g);
      r->dense_gradients.clear();
    }
    return r;
  }
  virtual std::string device() const = 0;  // "cpu" or "gpu:0 (NVIDIA H100 ...)"
};

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_STEP_RUNNER_H_
