// StepExecutor: runs a graph step on some device; the CPU Executor and the
// GpuExecutor both are one, so the step runner does not care which.
//
// Feeds are host tensors by node name (Placeholder and Variable nodes);
// fetches are tensor names and come back as host tensors. Run may be called
// from one thread at a time.
#ifndef PSRT_COMMON_COMPUTE_STEP_EXECUTOR_H_
#define PSRT_COMMON_COMPUTE_STEP_EXECUTOR_H_

#include <functional>
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
  // Called with fetch i's tensor as soon as the step has made it (a
  // backward pass makes the last layer's gradients first), on the thread
  // running the step, while the rest of the step waits for it to return.
  using FetchReady = std::function<void(size_t fetch, const Tensor& value)>;
  // Run that hands each fetch to `ready` once it is final; the result is
  // Run's. This default, for executors that cannot tell earlier, hands them
  // all over at the end.
  virtual absl::StatusOr<std::vector<Tensor>> RunStreaming(const std::map<std::string, Tensor>& feeds,
                                                           const std::vector<std::string>& fetches,
                                                           uint64_t seed, bool training,
                                                           const FetchReady& ready) {
    absl::StatusOr<std::vector<Tensor>> out = Run(feeds, fetches, seed, training);
    if (out.ok() && ready) {
      for (size_t i = 0; i < out->size(); ++i) ready(i, (*out)[i]);
    }
    return out;
  }
  // "cpu", or "gpu:0 (<device name>)".
  virtual std::string device_name() const = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_STEP_EXECUTOR_H_
