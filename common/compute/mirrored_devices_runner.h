// MirroredDevicesRunner: one worker's step on several local devices, as
// TensorFlow's MirroredStrategy runs it. The worker's batch (the global
// batch of its replicas) is split by rows into one slice per device; each
// device runs the step's graph on its slice on a thread of its own, with
// the same parameters; the devices' gradients, weighted by their slices'
// sizes, are summed with a local all-reduce (LocalCollectiveGroup, in rank
// order), so the result is the gradient of the whole batch's mean loss
// whatever the split. What the worker pushes or all-reduces across workers
// next is that one result: devices reduce locally first.
//
// CPU device replicas make the whole path testable on any machine; with
// GPU devices the worker passes GPU executors (one per GPU) and NCCL's group
// (common/collective/nccl_local_collective) as `make_ranks`. The gradients
// are host tensors here, so NCCL stages them through device memory.
//
//   ASSIGN_OR_RETURN(auto runner, MirroredDevicesRunner::Create(assignment, 2, make_device));
//   ASSIGN_OR_RETURN(StepResult r, runner->Run(dense, {}, batch, step));
//
// Dense features only: a batch with sparse (embedding) features is refused
// at Create. Thread-compatible: one Run at a time.
#ifndef PSRT_COMMON_COMPUTE_MIRRORED_DEVICES_RUNNER_H_
#define PSRT_COMMON_COMPUTE_MIRRORED_DEVICES_RUNNER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/collective/collective.h"
#include "common/compute/step_runner.h"
#include "proto/worker_service.pb.h"

namespace psrt {

class MirroredDevicesRunner : public StepRunner {
 public:
  // Makes device d's runner.
  using DeviceFactory = std::function<absl::StatusOr<std::unique_ptr<StepRunner>>(int device)>;

  // The local all-reduce's ranks, one per device.
  using RanksFactory = std::function<absl::StatusOr<std::vector<std::unique_ptr<Collective>>>(int devices)>;

  // `devices` >= 1 replicas; refuses an assignment whose graph reads
  // embedding tables (INVALID_ARGUMENT). Without `make_ranks` the devices
  // reduce with LocalCollectiveGroup (in rank order).
  static absl::StatusOr<std::unique_ptr<MirroredDevicesRunner>> Create(const WorkerAssignment& a, int devices,
                                                                        const DeviceFactory& make_device,
                                                                        const RanksFactory& make_ranks = nullptr);

  std::vector<std::string> DenseVariables() const override { return devices_[0]->DenseVariables(); }
  absl::StatusOr<RowRequest> SparseRows(const Batch& batch) const override { return RowRequest(); }
  absl::StatusOr<StepResult> Run(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                 int64_t step) override;
  std::string device() const override;

 private:
  MirroredDevicesRunner() = default;

  std::vector<std::unique_ptr<StepRunner>> devices_;
  std::vector<std::unique_ptr<Collective>> ranks_;  // one per device
  std::vector<std::string> metrics_;                 // as StepResult names them
};

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_MIRRORED_DEVICES_RUNNER_H_
