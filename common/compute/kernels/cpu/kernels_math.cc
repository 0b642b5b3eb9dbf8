// CPU kernels: broadcasting arithmetic, the reductions that are their
// gradients (and ReduceSum/ReduceMean), and Clip.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/compute/kernels/broadcast.h"
#include "common/compute/kernels/kernel.h"
#include "common/graph/graph_builder.h"

namespace psrt {
namespace {

enum class Bin { kAdd, kSub, kMul, kDiv, kFirst };

template <Bin op>
inline float Apply(float a, float b) {
  if constexpr (op == Bin::kAdd) return a + b;
  if constexpr (op == Bin::kSub) return a - b;
  if constexpr (op == Bin::kMul) return a * b;
  if constexpr (op == Bin::kDiv) return a / b;
  return a;
}

// out[j] = scale * f(a[j * sa], b[j * sb]) for j < n; the strides are 0 or
// 1, fixed at compile time so the loop vectorises.
template <Bin op, int sa, int sb>
void Run(const float* a, const float* b, float* out, int64_t n, float scale) {
  for (int64_t j = 0; j < n; ++j) out[j] = scale * Apply<op>(a[j * sa], b[j * sb]);
}

template <Bin op>
void RunRow(const float* a, int64_t sa, const float* b, int64_t sb, float* out, int64_t n, float scale) {
  if (sa && sb) return Run<op, 1, 1>(a, b, out, n, scale);
  if (sa) return Run<op, 1, 0>(a, b, out, n, scale);
  if (sb) return Run<op, 0, 1>(a, b, out, n, scale);
  return Run<op, 0, 0>(a, b, out, n, scale);
}

// Walks the plan: every output row (all dims but the last) in chunks of
// the last dim, in parallel.
template <Bin op>
void Broadcast(const KernelContext& c, const BroadcastPlan& p, const float* a, const float* b, float* out,
               float scale) {
  const int rank = static_cast<int>(p.dims.size());
  if (rank == 0) {
    if (p.size == 1) out[0] = scale * Apply<op>(a[0], b[0]);
    return;
  }
  const int64_t inner = p.dims[rank - 1], sa = p.stride_a[rank - 1], sb = p.stride_b[rank - 1];
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (inner + kChunk - 1) / kChunk, rows = inner == 0 ? 0 : p.size / inner;
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index t = begin; t < end; ++t) {
      const int64_t row = t / chunks, from = (t % chunks) * kChunk, n = std::min(kChunk, inner - from);
      int64_t rest = row, oa = 0, ob = 0;
      for (int i = rank - 2; i >= 0; --i) {
        const int64_t k = rest % p.dims[i];
        rest /= p.dims[i];
        oa += k * p.stride_a[i];
        ob += k * p.stride_b[i];
      }
      RunRow<op>(a + oa + from * sa, sa, b + ob + from * sb, sb, out + row * inner + from, n, scale);
    }
  };
  c.device->parallelFor(rows * chunks, Eigen::TensorOpCost(8, 4, std::min(kChunk, inner)), work);
}

template <Bin op>
Kernel BinaryKernel() {
  return [](KernelContext& c) {
    const Tensor& a = c.inputs[0];
    const Tensor& b = c.inputs[1];
    BroadcastPlan p;
    if (absl::Status s = PlanBroadcast(a.shape().dims(), b.shape().dims(), &p); !s.ok()) return c.Error(s.message());
    Tensor out(DT_FLOAT, TensorShape(p.out_shape));
    Broadcast<op>(c, p, a.data<float>(), b.data<float>(), out.data<float>(), 1.0f);
    c.outputs = {out};
    return absl::OkStatus();
  };
}

// out = scale * (sum of `in` over the axes where `reduced`); out holds the
// kept axes in order. Coalesces first: the common shapes (a bias gradient
// [rows, C] -> [C], a global pool [N, H*W, C] -> [N, C], a sum to a
// scalar) run as Eigen reductions on the thread pool, others as a loop
// over the output.
void Reduce(const KernelContext& c, const float* in, const std::vector<int64_t>& shape,
            const std::vector<bool>& reduced, float scale, float* out) {
  std::vector<int64_t> dims;
  std::vector<bool> red;
  CoalesceReduction(shape, reduced, &dims, &red);
  int64_t in_size = 1, out_size = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    in_size *= dims[i];
    if (!red[i]) out_size *= dims[i];
  }
  const Eigen::ThreadPoolDevice& dev = *c.device;
  if (in_size == 0) {
    std::fill(out, out + out_size, 0.0f);
    return;
  }
  if (dims.empty() || (dims.size() == 1 && !red[0])) {  // nothing to reduce
    UMap<1>(out, out_size).device(dev) = UMap<1>(const_cast<float*>(in), out_size) * scale;
    return;
  }
  if (dims.size() == 1) {
    Eigen::TensorMap<Eigen::Tensor<float, 0, Eigen::RowMajor>> o(out);
    o.device(dev) = UMap<1>(const_cast<float*>(in), dims[0]).sum() * scale;
    return;
  }
  if (dims.size() == 2) {
    UMap<2> x(const_cast<float*>(in), dims[0], dims[1]);
    UMap<1> o(out, out_size);
    o.device(dev) = x.sum(Eigen::array<int, 1>{red[0] ? 0 : 1}) * scale;
    return;
  }
  if (dims.size() == 3 && !red[0]) {
    UMap<3> x(const_cast<float*>(in), dims[0], dims[1], dims[2]);
    UMap<2> o(out, dims[0], dims[2]);
    o.device(dev) = x.sum(Eigen::array<int, 1>{1}) * scale;
    return;
  }
  // Any other pattern: each output element sums its own input cells.
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> stride(rank);
  int64_t step = 1;
  for (int i = rank - 1; i >= 0; --i) {
    stride[i] = step;
    step *= dims[i];
  }
  const int64_t per_out = in_size / out_size;
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index o = begin; o < end; ++o) {
      int64_t rest = o, base = 0;
      for (int i = rank - 1; i >= 0; --i) {
        if (red[i]) continue;
        base += (rest % dims[i]) * stride[i];
        rest /= dims[i];
      }
      double sum = 0;
      for (int64_t k = 0; k < per_out; ++k) {
        int64_t r = k, off = base;
        for (int i = rank - 1; i >= 0; --i) {
          if (!red[i]) continue;
          off += (r % dims[i]) * stride[i];
          r /= dims[i];
        }
        sum += in[off];
      }
      out[o] = static_cast<float>(sum) * scale;
    }
  };
  dev.parallelFor(out_size, Eigen::TensorOpCost(per_out * 4, 4, per_out * 4), work);
}

// (dy, like) -> dy summed over the axes `like` repeats when broadcast
// (its gradient), times the scale attr.
absl::Status SumLike(KernelContext& c) {
  const Tensor& dy = c.inputs[0];
  std::vector<bool> reduced;
  if (absl::Status s = SumLikeAxes(dy.shape(), c.inputs[1].shape(), &reduced); !s.ok()) return c.Error(s.message());
  Tensor out(DT_FLOAT, c.inputs[1].shape());
  Reduce(c, dy.data<float>(), dy.shape().dims(), reduced, GetAttrF(*c.node, "scale", 1.0f), out.data<float>());
  c.outputs = {out};
  return absl::OkStatus();
}

// x summed (or averaged) over the axes attr; keep_dims keeps them as 1.
absl::Status ReduceKernel(KernelContext& c, bool mean) {
  const Tensor& x = c.inputs[0];
  Reduction r;
  if (absl::Status s = PlanReduction(*c.node, x.shape(), mean, &r); !s.ok()) return c.Error(s.message());
  Tensor out(DT_FLOAT, TensorShape(r.out_shape));
  Reduce(c, x.data<float>(), x.shape().dims(), r.reduced, r.scale, out.data<float>());
  c.outputs = {out};
  return absl::OkStatus();
}

// (dy, like) -> dy repeated to like's shape: the gradient of a reduction.
// dy lacks the axes attr's axes of `like` unless its rank equals like's;
// mean divides by the cells each dy element stands for.
absl::Status BroadcastLike(KernelContext& c) {
  const Tensor& dy = c.inputs[0];
  const TensorShape& like = c.inputs[1].shape();
  BroadcastPlan p;
  if (absl::Status s = PlanBroadcastLike(dy.shape(), like, GetAttrInts(*c.node, "axes"), &p); !s.ok()) {
    return c.Error(s.message());
  }
  Tensor out(DT_FLOAT, like);
  Broadcast<Bin::kFirst>(c, p, dy.data<float>(), dy.data<float>(), out.data<float>(), BroadcastLikeScale(*c.node, dy, like));
  c.outputs = {out};
  return absl::OkStatus();
}

float Lo(const NodeDef& n) { return GetAttrF(n, "min", -INFINITY); }
float Hi(const NodeDef& n) { return GetAttrF(n, "max", INFINITY); }

absl::Status Clip(KernelContext& c) {
  Tensor out(DT_FLOAT, c.inputs[0].shape());
  AsVector(out).device(*c.device) = AsVector(c.inputs[0]).cwiseMax(Lo(*c.node)).cwiseMin(Hi(*c.node));
  c.outputs = {out};
  return absl::OkStatus();
}

// (dy, x) -> dy where min < x < max (PyTorch's hardtanh, so ReLU6's), else 0.
absl::Status ClipGrad(KernelContext& c) {
  Tensor& dy = c.inputs[0];
  Tensor& x = c.inputs[1];
  if (dy.NumElements() != x.NumElements()) return c.Error("dy and x differ in size");
  Tensor out(DT_FLOAT, x.shape());
  auto X = AsVector(x);
  AsVector(out).device(*c.device) =
      (X > X.constant(Lo(*c.node)) && X < X.constant(Hi(*c.node))).select(AsVector(dy), X.constant(0.0f));
  c.outputs = {out};
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuMathKernels(KernelRegistry* r) {
  r->Register("BroadcastAdd", BinaryKernel<Bin::kAdd>());
  r->Register("BroadcastSub", BinaryKernel<Bin::kSub>());
  r->Register("BroadcastMul", BinaryKernel<Bin::kMul>());
  r->Register("BroadcastDiv", BinaryKernel<Bin::kDiv>());
  r->Register("SumLike", SumLike);
  r->Register("BroadcastLike", BroadcastLike);
  r->Register("ReduceSum", [](KernelContext& c) { return ReduceKernel(c, false); });
  r->Register("ReduceMean", [](KernelContext& c) { return ReduceKernel(c, true); });
  r->Register("Clip", Clip);
  r->Register("ClipGrad", ClipGrad);
}

}  // namespace psrt
