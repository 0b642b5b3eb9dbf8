#include "worker/gpu/gpu_executor.h"

#include "absl/strings/str_cat.h"
#include "common/cuda/gpu_axpy.h"
#include "common/graph/op_registry.h"
#include "common/status_macros.h"
#include "worker/gpu/gpu_device.h"
#include "worker/gpu/gpu_kernel.h"
#include "common/compute/graph_plan.h"

namespace psrt {

// Members are destroyed in reverse: tensors go back to the pool before the
// device (stream, handle, cached memory) is released.
struct GpuExecutor::Impl {
  std::unique_ptr<GraphPlan> plan;
  std::vector<const gpu::GpuKernel*> kernels;  // null for fed and Const nodes
  std::string name;
  std::unique_ptr<gpu::GpuDevice> device;
  std::vector<Tensor> constants;  // per node: its uploaded value (Const nodes only)
  Tensor error_flag;              // int32 on the device, see gpu::ErrorSlot
};

GpuExecutor::GpuExecutor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuExecutor::~GpuExecutor() = default;

absl::StatusOr<std::unique_ptr<GpuExecutor>> GpuExecutor::Create(const GraphDef& graph, int ordinal) {
  cuda::GpuProbe probe = cuda::ProbeGpu();
  if (!probe.available) return absl::FailedPreconditionError(absl::StrCat("no GPU: ", probe.why_not));
  if (ordinal < 0 || ordinal >= probe.device_count) {
    return absl::OutOfRangeError(absl::StrCat("GPU ", ordinal, " asked for, ", probe.device_count, " visible"));
  }
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(impl->plan, GraphPlan::Create(graph));
  // Every kernel is looked up before any device work, so a missing one is
  // reported at Create, not in the middle of a step.
  impl->kernels.resize(graph.node_size(), nullptr);
  for (int i = 0; i < graph.node_size(); ++i) {
    const NodeDef& n = graph.node(i);
    if (GraphPlan::IsFed(n) || n.op() == "Const") continue;
    impl->kernels[i] = gpu::GpuKernelRegistry::Get().Find(n.op());
    if (impl->kernels[i] == nullptr) {
      return absl::UnimplementedError(absl::StrCat("node ", n.name(), ": no GPU kernel for op ", n.op()));
    }
  }
  impl->name = absl::StrCat("gpu:", ordinal, " (", probe.name, ")");
  ASSIGN_OR_RETURN(impl->device, gpu::GpuDevice::Create(ordinal));
  // Constants: decoded by the CPU kernel (same errors), uploaded once.
  impl->constants.resize(graph.node_size());
  const Kernel* const_kernel = KernelRegistry::Cpu().Find("Const");
  for (int i = 0; i < graph.node_size(); ++i) {
    if (graph.node(i).op() != "Const") continue;
    KernelContext ctx;
    ctx.node = &graph.node(i);
    RETURN_IF_ERROR((*const_kernel)(ctx));
    ASSIGN_OR_RETURN(impl->constants[i], impl->device->Upload(ctx.outputs[0]));
  }
  ASSIGN_OR_RETURN(impl->error_flag, impl->device->Allocate(DT_INT32, TensorShape({1})));
  return std::unique_ptr<GpuExecutor>(new GpuExecutor(std::move(impl)));
}

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Run(const std::map<std::string, Tensor>& feeds,
                                                     const std::vector<std::string>& fetches, uint64_t seed,
                                                     bool training) {
  Impl& m = *impl_;
  ASSIGN_OR_RETURN(const GraphPlan::Steps* steps, m.plan->For(fetches));
  const GraphDef& graph = m.plan->graph();
  gpu::GpuDevice& dev = *m.device;
  RETURN_IF_ERROR(dev.Activate());
  int* error_flag = m.error_flag.data<int32_t>();
  PSRT_GPU_RETURN_IF_ERROR(gpu::Zero(dev.stream(), error_flag, sizeof(int32_t)), "clearing the error flag");
  GraphPlan::Values values(graph.node_size());
  std::vector<int> uses = steps->uses;
  gpu::GpuKernelContext ctx;
  ctx.gpu = &dev;
  ctx.training = training;
  ctx.seed = seed;
  for (int i : steps->order) {
    const NodeDef& n = graph.node(i);
    if (GraphPlan::IsFed(n)) {
      auto f = feeds.find(n.name());
      if (f == feeds.end()) {
        return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), " (", n.op(), ") was not fed"));
      }
      ASSIGN_OR_RETURN(Tensor t, dev.Upload(f->second));
      values[i] = {t};
      continue;
    }
    if (m.kernels[i] == nullptr) {  // Const
      values[i] = {m.constants[i]};
      continue;
    }
    ctx.node = &n;
    ctx.error_slot = gpu::ErrorSlot{error_flag, i + 1};
    RETURN_IF_ERROR(m.plan->GatherInputs(i, values, &ctx.inputs));
    ctx.outputs.clear();
    RETURN_IF_ERROR((*m.kernels[i])(ctx));
    values[i] = std::move(ctx.outputs);
    ctx.inputs.clear();
    m.plan->ReleaseInputs(i, *steps, &uses, &values);
  }
  // The flag comes back first: the step's results are only valid if no
  // kernel met a bad id or label. Its copy waits for every queued kernel,
  // so a fault while they ran shows here too.
  int32_t code = 0;
  PSRT_GPU_RETURN_IF_ERROR(gpu::CopyToHost(dev.stream(), &code, error_flag, sizeof(code)), "running the step on the GPU");
  if (code > 0 && code <= graph.node_size()) {
    const NodeDef& n = graph.node(code - 1);
    return absl::InvalidArgumentError(
        absl::StrCat("node ", n.name(), " (", n.op(), "): an id, row split or label is out of range"));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> on_device, m.plan->Fetched(*steps, fetches, values));
  std::vector<Tensor> out;
  for (const Tensor& t : on_device) {
    ASSIGN_OR_RETURN(Tensor host, dev.Download(t));
    out.push_back(std::move(host));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> GpuExecutor::OpsWithoutKernel() {
  std::vector<std::string> missing;
  for (const std::string& op : OpRegistry::Global().Names()) {
    if (op == "Placeholder" || op == "Variable" || op == "Const") continue;  // fed, or uploaded at Create
    if (gpu::GpuKernelRegistry::Get().Find(op) == nullptr) missing.push_back(op);
  }
  return missing;
}

std::string GpuExecutor::device_name() const { return impl_->name; }

gpu::PoolStats GpuExecutor::pool_stats() const { return impl_->device->pool_stats(); }

}  // namespace psrt
