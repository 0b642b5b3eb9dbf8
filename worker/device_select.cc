#include "worker/device_select.h"

#include "absl/strings/str_cat.h"
#include "common/cuda/gpu_axpy.h"
#include "glog/logging.h"
#include "common/compute/executor.h"
#include "worker/gpu/gpu_executor.h"

namespace psrt {

absl::StatusOr<DeviceChoice> ChooseDevice(const std::string& flag) {
  if (flag != "auto" && flag != "cpu" && flag != "gpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device must be auto, cpu or gpu, not ", flag));
  }
  DeviceChoice d;
  if (flag == "cpu") {
    d.reason = "--device=cpu";
  } else {
    // Without --config=cuda the probe answers "built without CUDA".
    cuda::GpuProbe gpu = cuda::ProbeGpu();
    if (gpu.available) {
      d.gpu = true;
      d.gpus = gpu.device_count;
      d.reason = absl::StrCat("--device=", flag, ": GPU 0 is ", gpu.name, " (", gpu.device_count, " found)");
    } else if (flag == "gpu") {
      return absl::FailedPreconditionError(absl::StrCat("--device=gpu: ", gpu.why_not));
    } else {
      d.reason = absl::StrCat("--device=auto: no usable GPU (", gpu.why_not, ")");
    }
  }
  LOG(INFO) << "device: " << (d.gpu ? "gpu" : "cpu") << " (" << d.reason << ")";
  return d;
}

absl::StatusOr<std::unique_ptr<StepExecutor>> CreateStepExecutor(const GraphDef& graph, const DeviceChoice& device,
                                                                 int threads, int gpu_ordinal) {
  if (device.gpu) {
    absl::StatusOr<std::unique_ptr<GpuExecutor>> g = GpuExecutor::Create(graph, gpu_ordinal);
    if (!g.ok()) return g.status();
    return std::unique_ptr<StepExecutor>(std::move(*g));
  }
  ExecutorOptions o;
  o.threads = threads;
  absl::StatusOr<std::unique_ptr<Executor>> e = Executor::Create(graph, o);
  if (!e.ok()) return e.status();
  return std::unique_ptr<StepExecutor>(std::move(*e));
}

MirroredLayout LayoutMirrored(const DeviceChoice& device, int devices) {
  MirroredLayout l;
  l.ordinal.assign(std::max(devices, 0), 0);
  if (!device.gpu) {
    l.why = absl::StrCat(devices, " CPU device replicas, reduced on the host");
    return l;
  }
  const int gpus = std::max(device.gpus, 1);
  for (int d = 0; d < devices; ++d) l.ordinal[d] = d % gpus;
  l.nccl = devices > 1 && devices <= gpus;
  l.why = l.nccl ? absl::StrCat(devices, " replicas on GPUs 0..", devices - 1, ", reduced with NCCL")
                 : absl::StrCat(devices, " replicas on ", gpus, " GPU(s) (shared round-robin), reduced on the host");
  return l;
}

}  // namespace psrt
