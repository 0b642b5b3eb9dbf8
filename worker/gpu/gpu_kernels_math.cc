// GPU kernels: broadcasting arithmetic, SumLike / BroadcastLike (their
// gradients), BroadcastTo, ReduceSum / ReduceMean, Clip, BatchNorm and
// LayerNorm. Shapes are planned on the host exactly as kernels_math.cc
// plans them (common/compute/kernels/broadcast.h), so both devices accept
// the same inputs.
#include <cmath>
#include <initializer_list>
#include <limits>
#include <vector>

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

// BroadcastTo(x, ref) with its shape attr: a dim d < 0 stands for
// (-d) * ref's first dim (ref is read for its shape only).
absl::Status BroadcastToOp(GpuKernelContext& c) {
  const Tensor& x = c.inputs[0];
  const TensorShape& ref = c.inputs[1].shape();
  std::vector<int64_t> target = GetAttrInts(*c.node, "shape");
  for (int64_t& d : target) {
    if (d >= 0) continue;
    if (ref.rank() == 0) return c.Error(absl::StrCat("shape dim ", d, " needs ref's first dim, but ref is a scalar"));
    if (ref.dim(0) > 0 && d < -(std::numeric_limits<int64_t>::max() / ref.dim(0))) {
      return c.Error(absl::StrCat("shape dim ", d, " times ref's first dim ", ref.dim(0), " overflows"));
    }
    d = -d * ref.dim(0);
  }
  BroadcastPlan p;
  if (absl::Status s = PlanBroadcast(x.shape().dims(), target, &p); !s.ok() || p.out_shape != target) {
    return c.Error(absl::StrCat("x ", x.shape().ToString(), " does not broadcast to ", TensorShape(target).ToString()));
  }
  ASSIGN_OR_RETURN(BroadcastDims d, DimsOf(c, p));
  ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape(target)));
  PSRT_GPU_CHECK(c, Broadcast(c.stream(), BroadcastOp::kFirst, d, x.data<float>(), x.data<float>(), out.data<float>(),
                              p.size, 1.0f));
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

absl::Status ChannelRows(const GpuKernelContext& c, const Tensor& x, int64_t* rows, int64_t* ch) {
  if (x.shape().rank() < 2) return c.Error(absl::StrCat("input ", x.shape().ToString(), " has no channel axis"));
  *ch = x.shape().dim(x.shape().rank() - 1);
  *rows = *ch == 0 ? 0 : x.NumElements() / *ch;
  if (*rows == 0) return c.Error("batch normalisation of an empty batch");
  return absl::OkStatus();
}

// (x, scale, offset[, moving mean, moving var]) -> y, mean, var, unbiased
// var, as the CPU kernel: evaluation normalises with the moving statistics
// where they are given, a training step with the batch's.
absl::Status BatchNormOp(GpuKernelContext& c) {
  const Tensor& x = c.inputs[0];
  int64_t rows, ch;
  RETURN_IF_ERROR(ChannelRows(c, x, &rows, &ch));
  if (c.inputs.size() != 3 && c.inputs.size() != 5) return c.Error("takes 3 or 5 inputs");
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    if (c.inputs[i].NumElements() != ch) return c.Error("scale, offset or a moving statistic does not match the channels");
  }
  ASSIGN_OR_RETURN(Tensor y, c.Output(x.shape()));
  ASSIGN_OR_RETURN(Tensor mean, c.Output(TensorShape({ch})));
  ASSIGN_OR_RETURN(Tensor var, c.Output(TensorShape({ch})));
  ASSIGN_OR_RETURN(Tensor unbiased, c.Output(TensorShape({ch})));
  const float eps = GetAttrF(*c.node, "epsilon", 1e-5f);
  PSRT_GPU_CHECK(c, BatchNormStats(c.stream(), x.data<float>(), rows, ch, mean.data<float>(), var.data<float>()));
  // unbiased = var * n / (n - 1); a single row keeps its biased 0.
  const float factor = rows > 1 ? static_cast<float>(static_cast<double>(rows) / (rows - 1)) : 1.0f;
  PSRT_GPU_CHECK(c, Fill(c.stream(), unbiased.data<float>(), factor, ch));
  PSRT_GPU_CHECK(c, Binary(c.stream(), BinaryOp::kMul, var.data<float>(), unbiased.data<float>(), unbiased.data<float>(), ch));
  const bool moving = !c.training && c.inputs.size() == 5;
  const float* use_mean = moving ? c.inputs[3].data<float>() : mean.data<float>();
  const float* use_var = moving ? c.inputs[4].data<float>() : var.data<float>();
  PSRT_GPU_CHECK(c, BatchNormApply(c.stream(), x.data<float>(), c.inputs[1].data<float>(), c.inputs[2].data<float>(),
                                   use_mean, use_var, eps, rows, ch, y.data<float>()));
  c.outputs = {y, mean, var, unbiased};
  return absl::OkStatus();
}

absl::Status BatchNormGradOp(GpuKernelContext& c) {  // (dy, x, scale, mean, var) -> dx, dscale, doffset
  const Tensor& dy = c.inputs[0];
  const Tensor& x = c.inputs[1];
  int64_t rows, ch;
  RETURN_IF_ERROR(ChannelRows(c, x, &rows, &ch));
  if (dy.NumElements() != x.NumElements()) return c.Error("dy and x differ in size");
  for (int i = 2; i <= 4; ++i) {
    if (c.inputs[i].NumElements() != ch) return c.Error("scale, mean or var does not match the channels");
  }
  const float eps = GetAttrF(*c.node, "epsilon", 1e-5f);
  ASSIGN_OR_RETURN(Tensor dx, c.Output(x.shape()));
  ASSIGN_OR_RETURN(Tensor dscale, c.Output(TensorShape({ch})));
  ASSIGN_OR_RETURN(Tensor doffset, c.Output(TensorShape({ch})));
  const float* mean = c.inputs[3].data<float>();
  const float* var = c.inputs[4].data<float>();
  PSRT_GPU_CHECK(c, BatchNormGradSums(c.stream(), dy.data<float>(), x.data<float>(), mean, var, eps, rows, ch,
                                      dscale.data<float>(), doffset.data<float>()));
  PSRT_GPU_CHECK(c, BatchNormGradInput(c.stream(), dy.data<float>(), x.data<float>(), c.inputs[2].data<float>(), mean,
                                       var, dscale.data<float>(), doffset.data<float>(), eps, rows, ch,
                                       dx.data<float>()));
  c.outputs = {dx, dscale, doffset};
  return absl::OkStatus();
}

// x seen as [rows, d] over its last axis; each of the `params` inputs
// (gamma, beta) must hold d values.
absl::Status LastAxisRows(const GpuKernelContext& c, const Tensor& x, std::initializer_list<int> params,
                          int64_t* rows, int64_t* d) {
  const int r = x.shape().rank();
  if (r == 0) return c.Error("input is a scalar: no axis to normalise");
  *d = x.shape().dim(r - 1);
  *rows = 1;
  for (int i = 0; i + 1 < r; ++i) *rows *= x.shape().dim(i);
  for (int i : params) {
    if (c.inputs[i].NumElements() != *d) {
      return c.Error(absl::StrCat("input ", i, " ", c.inputs[i].shape().ToString(), " does not match the last axis of ",
                                  x.shape().ToString()));
    }
  }
  return absl::OkStatus();
}

float Epsilon(const GpuKernelContext& c) { return GetAttrF(*c.node, "epsilon", 1e-5f); }

absl::Status LayerNormOp(GpuKernelContext& c) {  // (x, gamma, beta) -> y
  const Tensor& x = c.inputs[0];
  int64_t rows, d;
  RETURN_IF_ERROR(LastAxisRows(c, x, {1, 2}, &rows, &d));
  ASSIGN_OR_RETURN(Tensor y, c.Output(x.shape()));
  PSRT_GPU_CHECK(c, LayerNorm(c.stream(), x.data<float>(), c.inputs[1].data<float>(), c.inputs[2].data<float>(),
                              Epsilon(c), rows, d, y.data<float>()));
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status LayerNormGradOp(GpuKernelContext& c) {  // (dy, x, gamma) -> dx, dgamma, dbeta
  const Tensor& dy = c.inputs[0];
  const Tensor& x = c.inputs[1];
  int64_t rows, d;
  RETURN_IF_ERROR(LastAxisRows(c, x, {2}, &rows, &d));
  if (dy.shape() != x.shape()) {
    return c.Error(absl::StrCat("dy ", dy.shape().ToString(), " and x ", x.shape().ToString(), " differ"));
  }
  ASSIGN_OR_RETURN(Tensor dx, c.Output(x.shape()));
  ASSIGN_OR_RETURN(Tensor dgamma, c.Output(TensorShape({d})));
  ASSIGN_OR_RETURN(Tensor dbeta, c.Output(TensorShape({d})));
  ASSIGN_OR_RETURN(Tensor stats, c.Output(TensorShape({rows, 2})));  // scratch: each row's mean and rstd
  PSRT_GPU_CHECK(c, LayerNormGrad(c.stream(), dy.data<float>(), x.data<float>(), c.inputs[2].data<float>(), Epsilon(c),
                                  rows, d, stats.data<float>(), dx.data<float>(), dgamma.data<float>(),
                                  dbeta.data<float>()));
  c.outputs = {dx, dgamma, dbeta};
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
  r->Register("BroadcastTo", BroadcastToOp);
  r->Register("ReduceSum", ReduceOp(false));
  r->Register("ReduceMean", ReduceOp(true));
  r->Register("Clip", ClipOp);
  r->Register("ClipGrad", ClipGradOp);
  r->Register("BatchNorm", BatchNormOp);
  r->Register("BatchNormGrad", BatchNormGradOp);
  r->Register("LayerNorm", LayerNormOp);
  r->Register("LayerNormGrad", LayerNormGradOp);
}

}  // namespace gpu
}  // namespace psrt
