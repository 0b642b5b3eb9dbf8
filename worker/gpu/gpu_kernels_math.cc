// GPU kernels: broadcasting arithmetic, SumLike / BroadcastLike (their
// gradients), ReduceSum / ReduceMean and Clip. Shapes are planned on the
// host exactly as kernels_math.cc plans them (common/compute/kernels/
// broadcast.h), so both devices accept the same inputs.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/compute/kernels/broadcast.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"
#include "worker/gpu/gpu_kernel.h"

namespace psrt {
namespace gpu {
namespace {

absl::StatusOr<BroadcastDims> DimsOf(const GpuKernelContext& c, const BroadcastPlan& p) {
  if (p.dims.size() > static_cast<size_t>(kMaxBroadcastRank)) {
    return c.Error(absl::StrCat("broadcast of ", p.dims.size(), " alternating axes (at most ", kMaxBroadcastRank, ")"));
  }
  BroadcastDims d{static_cast<int>(p.dims.size()), {}, {}, {}};
  for (size_t i = 0; i < p.dims.size(); ++i) {
    d.dims[i] = p.dims[i];
    d.stride_a[i] = p.stride_a[i];
    d.stride_b[i] = p.stride_b[i];
  }
  return d;
}

GpuKernel BroadcastBinary(BroadcastOp op) {
  return [op](GpuKernelContext& c) -> absl::Status {
    BroadcastPlan p;
    if (absl::Status s = PlanBroadcast(c.inputs[0].shape().dims(), c.inputs[1].shape().dims(), &p); !s.ok()) {
      return c.Error(s.message());
    }
    ASSIGN_OR_RETURN(BroadcastDims d, DimsOf(c, p));
    ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape(p.out_shape)));
    PSRT_GPU_CHECK(c, Broadcast(c.stream(), op, d, c.inputs[0].data<float>(), c.inputs[1].data<float>(),
                                out.data<float>(), p.size, 1.0f));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

absl::Status ReduceTo(GpuKernelContext& c, const Tensor& in, const std::vector<bool>& reduced, float scale,
                      Tensor* out) {
  std::vector<int64_t> dims;
  std::vector<bool> red;
  CoalesceReduction(in.shape().dims(), reduced, &dims, &red);
  if (dims.size() > static_cast<size_t>(kMaxBroadcastRank)) {
    return c.Error(absl::StrCat("reduction over ", dims.size(), " alternating axes (at most ", kMaxBroadcastRank, ")"));
  }
  ReduceDims d{static_cast<int>(dims.size()), {}, {}};
  for (size_t i = 0; i < dims.size(); ++i) {
    d.dims[i] = dims[i];
    d.reduced[i] = red[i];
  }
  return c.Check(Reduce(c.stream(), d, in.data<float>(), out->data<float>(), out->NumElements(), scale));
}

absl::Status SumLikeOp(GpuKernelContext& c) {  // (dy, like)
  const Tensor& dy = c.inputs[0];
  std::vector<bool> reduced;
  if (absl::Status s = SumLikeAxes(dy.shape(), c.inputs[1].shape(), &reduced); !s.ok()) return c.Error(s.message());
  ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[1].shape()));
  RETURN_IF_ERROR(ReduceTo(c, dy, reduced, GetAttrF(*c.node, "scale", 1.0f), &out));
  c.outputs = {out};
  return absl::OkStatus();
}

GpuKernel ReduceOp(bool mean) {
  return [mean](GpuKernelContext& c) -> absl::Status {
    const Tensor& x = c.inputs[0];
    Reduction r;
    if (absl::Status s = PlanReduction(*c.node, x.shape(), mean, &r); !s.ok()) return c.Error(s.message());
    ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape(r.out_shape)));
    RETURN_IF_ERROR(ReduceTo(c, x, r.reduced, r.scale, &out));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

absl::Status BroadcastLikeOp(GpuKernelContext& c) {  // (dy, like)
  const Tensor& dy = c.inputs[0];
  const TensorShape& like = c.inputs[1].shape();
  BroadcastPlan p;
  if (absl::Status s = PlanBroadcastLike(dy.shape(), like, GetAttrInts(*c.node, "axes"), &p); !s.ok()) {
    return c.Error(s.message());
  }
  ASSIGN_OR_RETURN(BroadcastDims d, DimsOf(c, p));
  ASSIGN_OR_RETURN(Tensor out, c.Output(like));
  PSRT_GPU_CHECK(c, Broadcast(c.stream(), BroadcastOp::kFirst, d, dy.data<float>(), dy.data<float>(), out.data<float>(),
                              p.size, BroadcastLikeScale(*c.node, dy, like)));
  c.outputs = {out};
  return absl::OkStatus();
}

float Lo(const NodeDef& n) { return GetAttrF(n, "min", -INFINITY); }
float Hi(const NodeDef& n) { return GetAttrF(n, "max", INFINITY); }

absl::Status ClipOp(GpuKernelContext& c) {
  ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[0].shape()));
  PSRT_GPU_CHECK(c, Clip(c.stream(), c.inputs[0].data<float>(), out.data<float>(), out.NumElements(), Lo(*c.node),
                         Hi(*c.node)));
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status ClipGradOp(GpuKernelContext& c) {  // (dy, x)
  if (c.inputs[0].NumElements() != c.inputs[1].NumElements()) return c.Error("dy and x differ in size");
  ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[1].shape()));
  PSRT_GPU_CHECK(c, ClipGrad(c.stream(), c.inputs[0].data<float>(), c.inputs[1].data<float>(), out.data<float>(),
                             out.NumElements(), Lo(*c.node), Hi(*c.node)));
  c.outputs = {out};
  return absl::OkStatus();
}

}  // namespace

void RegisterGpuMathKernels(GpuKernelRegistry* r) {
  r->Register("BroadcastAdd", BroadcastBinary(BroadcastOp::kAdd));
  r->Register("BroadcastSub", BroadcastBinary(BroadcastOp::kSub));
  r->Register("BroadcastMul", BroadcastBinary(BroadcastOp::kMul));
  r->Register("BroadcastDiv", BroadcastBinary(BroadcastOp::kDiv));
  r->Register("SumLike", SumLikeOp);
  r->Register("BroadcastLike", BroadcastLikeOp);
  r->Register("ReduceSum", ReduceOp(false));
  r->Register("ReduceMean", ReduceOp(true));
  r->Register("Clip", ClipOp);
  r->Register("ClipGrad", ClipGradOp);
}

}  // namespace gpu
}  // namespace psrt
