// What the worker's loop needs from the rest of the system, as interfaces:
// the parameter servers (pull and push) and the compute step (forward and
// backward on a batch). The daemon plugs in the gRPC PS client and the graph
// executor; unit tests plug in fakes to drive every path of the loop.
#ifndef PSRT_WORKER_INTERFACES_H_
#define PSRT_WORKER_INTERFACES_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/ps_service.pb.h"
#include "worker/input/example.h"

namespace psrt {

using TensorMap = std::map<std::string, Tensor>;

// Rows of sparse variables a step reads: variable -> unique ids.
using RowRequest = std::map<std::string, Tensor>;

// Pulls and pushes against every PS of the job, in parallel where it can.
// A pull (on the worker's prefetch thread) may run while a push (on its loop
// thread) does; implementations allow that one pull and one push at once.
class ParameterClient {
 public:
  virtual ~ParameterClient() = default;
  // Dense variables, whole (slices of a partitioned one are joined).
  // SYNC / BOUNDED_STALENESS: waits until the parameters for `step` exist.
  // UNAVAILABLE when a PS is down; NOT_FOUND when a PS lost its variables.
  virtual absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& variables,
                                         int64_t step) = 0;
  // Rows of sparse variables: for each variable, [n, dim] in the order of ids.
  virtual absl::StatusOr<TensorMap> PullRows(const RowRequest& rows, int64_t step) = 0;
  // Dense gradients (whole variables) and sparse ones (ids + rows).
  virtual absl::Status Push(const RequestId& id, const TensorMap& dense,
                            const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) = 0;
};

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
  virtual std::string device() const = 0;  // "cpu" or "gpu:0 (NVIDIA H100 ...)"
};

}  // namespace psrt

#endif  // PSRT_WORKER_INTERFACES_H_
