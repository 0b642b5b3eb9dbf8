// --device=auto|cpu|gpu: where a worker's graph steps run.
//
//   auto  the GPU when CUDA was built in (--config=cuda) and a driver and a
//         device are found, else the CPU;
//   gpu   the GPU, or an error saying why not;
//   cpu   the CPU.
// The choice and its reason are logged.
#ifndef PSRT_WORKER_DEVICE_SELECT_H_
#define PSRT_WORKER_DEVICE_SELECT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/graph.pb.h"
#include "common/compute/step_executor.h"

namespace psrt {

struct DeviceChoice {
  bool gpu = false;
  int gpus = 0;        // GPUs visible, when gpu
  std::string reason;  // why this device, for the log
};

absl::StatusOr<DeviceChoice> ChooseDevice(const std::string& flag);

// The chosen device's executor; `threads` is for the CPU one (0 = a thread
// per core), `gpu_ordinal` for the GPU one.
absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(const GraphDef& graph, const DeviceChoice& device,
                                                                 int threads = 0, int gpu_ordinal = 0);

// The GraphStepRunner's executor factory for `device`.
inline auto ExecutorFactoryFor(const DeviceChoice& device, int gpu_ordinal = 0) {
  return [device, gpu_ordinal](const GraphDef& graph, int threads) {
    return CreateStepExecutor(graph, device, threads, gpu_ordinal);
  };
}

// How a worker's `devices` mirrored replicas map onto `device`: replica d
// on GPU `ordinal[d]`, reduced with NCCL when each has a GPU of its own;
// otherwise (CPU, or fewer GPUs than replicas) on the host in rank order.
struct MirroredLayout {
  std::vector<int> ordinal;
  bool nccl = false;
  std::string why;  // for the log
};
MirroredLayout LayoutMirrored(const DeviceChoice& device, int devices);

}  // namespace psrt

#endif  // PSRT_WORKER_DEVICE_SELECT_H_
