// StepExecutor: runs a graph step on some device; the CPU Executor and the
// GpuExecutor both are one, so the step runner does not care which.
//
// Feeds are host tensors by node name (Placeholder and Variable nodes);
// fetches are tensor names and come back as host tensors. Run may be called
// from one thread at a time.
#ifndef PSRT_COMMON_COMPUTE_STEP_EXECUTOR_H_
#define PSRT_COMMON_COMPUTE_STEP_EXECUTOR_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace psrt {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual absl::StatusOr<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& feeds,
                                                  const std::vector<std::string>& fetches, uint64_t seed,
                                                  bool training) = 0;
  // "cpu", or "gpu:0 (<device name>)".
  virtual std::string device_name() const = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_STEP_EXECUTOR_H_
