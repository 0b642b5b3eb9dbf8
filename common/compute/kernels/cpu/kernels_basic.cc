// CPU kernels: sources, matrix products, element-wise ops, reshaping.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"
#include "common/compute/kernels/kernel.h"
#include "common/compute/kernels/kernel_shapes.h"

namespace psrt {

absl::Status KernelContext::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat("node ", node->name(), " (", node->op(), "): ", what));
}

const KernelRegistry& KernelRegistry::Cpu() {
  static const KernelRegistry* r = [] {
    auto* reg = new KernelRegistry();
    RegisterCpuBasicKernels(reg);
    RegisterCpuNnKernels(reg);
    RegisterCpuMathKernels(reg);
    RegisterCpuSequenceKernels(reg);
    return reg;
  }();
  return *r;
}

namespace {

using Dims = Eigen::array<Eigen::IndexPair<int>, 1>;

absl::Status MatMul(KernelContext& c) {
  Tensor& a = c.inputs[0];
  Tensor& b = c.inputs[1];
  MatMulDims d;
  if (auto s = MatMulShape(c, a.shape(), b.shape(), &d); !s.ok()) return s;
  Tensor out(DT_FLOAT, TensorShape({d.m, d.n}));
  auto A = AsMatrix(a, a.shape().dim(0), a.shape().dim(1));
  auto B = AsMatrix(b, b.shape().dim(0), b.shape().dim(1));
  auto C = AsMatrix(out, d.m, d.n);
  Dims dims = {Eigen::IndexPair<int>(d.ta ? 0 : 1, d.tb ? 1 : 0)};
  C.device(*c.device) = A.contract(B, dims);
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status BiasAdd(KernelContext& c) {
  Tensor& x = c.inputs[0];
  Tensor& b = c.inputs[1];
  int64_t n = b.NumElements();
  if (x.shape().rank() == 0 || x.shape().dim(x.shape().rank() - 1) != n) {
    return c.Error(absl::StrCat("bias ", b.shape().ToString(), " does not match ", x.shape().ToString()));
  }
  int64_t rows = x.NumElements() / n;
  Tensor out(DT_FLOAT, x.shape());
  auto X = AsMatrix(x, rows, n);
  auto Y = AsMatrix(out, rows, n);
  Eigen::array<Eigen::Index, 2> bcast = {rows, 1};
  UMap<2> B(b.data<float>(), 1, n);
  Y.device(*c.device) = X + B.broadcast(bcast);
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status BiasAddGrad(KernelContext& c) {
  Tensor& dy = c.inputs[0];
  int64_t n = dy.shape().dim(dy.shape().rank() - 1);
  int64_t rows = dy.NumElements() / n;
  Tensor out(DT_FLOAT, TensorShape({n}));
  auto D = AsMatrix(dy, rows, n);
  UMap<1> O(out.data<float>(), n);
  Eigen::array<int, 1> red = {0};
  O.device(*c.device) = D.sum(red);
  c.outputs = {out};
  return absl::OkStatus();
}

template <typename F>
Kernel Elementwise1(F f) {
  return [f](KernelContext& c) {
    Tensor& x = c.inputs[0];
    Tensor out(DT_FLOAT, x.shape());
    f(c, AsVector(x), AsVector(out));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

// (dy, y) -> dx
template <typename F>
Kernel Elementwise2(F f) {
  return [f](KernelContext& c) {
    Tensor& a = c.inputs[0];
    Tensor& b = c.inputs[1];
    if (a.NumElements() != b.NumElements()) {
      return c.Error(absl::StrCat("shapes differ: ", a.shape().ToString(), " and ", b.shape().ToString()));
    }
    Tensor out(DT_FLOAT, a.shape());
    f(c, AsVector(a), AsVector(b), AsVector(out));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

absl::Status Softmax(KernelContext& c) {
  Tensor& x = c.inputs[0];
  int64_t n = x.shape().dim(x.shape().rank() - 1), rows = x.NumElements() / n;
  Tensor out(DT_FLOAT, x.shape());
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data<float>() + r * n;
    float* o = out.data<float>() + r * n;
    float m = *std::max_element(in, in + n), s = 0;
    for (int64_t i = 0; i < n; ++i) s += (o[i] = std::exp(in[i] - m));
    for (int64_t i = 0; i < n; ++i) o[i] /= s;
  }
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status SoftmaxGrad(KernelContext& c) {
  Tensor& dy = c.inputs[0];
  Tensor& y = c.inputs[1];
  int64_t n = y.shape().dim(y.shape().rank() - 1), rows = y.NumElements() / n;
  Tensor out(DT_FLOAT, y.shape());
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = dy.data<float>() + r * n;
    const float* p = y.data<float>() + r * n;
    float dot = 0;
    for (int64_t i = 0; i < n; ++i) dot += g[i] * p[i];
    for (int64_t i = 0; i < n; ++i) out.data<float>()[r * n + i] = p[i] * (g[i] - dot);
  }
  c.outputs = {out};
  return absl::OkStatus();
}

// Over the last axis: y = x - max - log(sum(exp(x - max))).
absl::Status LogSoftmax(KernelContext& c) {
  Tensor& x = c.inputs[0];
  if (x.shape().rank() == 0) return c.Error("needs an axis");
  const int64_t n = x.shape().dim(x.shape().rank() - 1);
  const int64_t rows = n == 0 ? 0 : x.NumElements() / n;
  Tensor out(DT_FLOAT, x.shape());
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data<float>() + r * n;
    float* o = out.data<float>() + r * n;
    const float m = *std::max_element(in, in + n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(in[i] - m));
    const float shift = m + static_cast<float>(std::log(s));
    for (int64_t i = 0; i < n; ++i) o[i] = in[i] - shift;
  }
  c.outputs = {out};
  return absl::OkStatus();
}

// (dy, y) -> dy - softmax(x) * sum(dy), softmax(x) = exp(y).
absl::Status LogSoftmaxGrad(KernelContext& c) {
  Tensor& dy = c.inputs[0];
  Tensor& y = c.inputs[1];
  if (y.shape().rank() == 0 || dy.shape() != y.shape()) return c.Error("dy and y differ in shape");
  const int64_t n = y.shape().dim(y.shape().rank() - 1);
  const int64_t rows = n == 0 ? 0 : y.NumElements() / n;
  Tensor out(DT_FLOAT, y.shape());
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = dy.data<float>() + r * n;
    const float* p = y.data<float>() + r * n;
    float* o = out.data<float>() + r * n;
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += g[i];
    for (int64_t i = 0; i < n; ++i) o[i] = g[i] - std::exp(p[i]) * sum;
  }
  c.outputs = {out};
  return absl::OkStatus();
}

// y's axis i is x's axis perm[i].
absl::Status Transpose(KernelContext& c) {
  Tensor& x = c.inputs[0];
  TransposePlan p;
  if (auto s = PlanTranspose(c, x.shape(), &p); !s.ok()) return s;
  if (p.in_order) {
    absl::StatusOr<Tensor> r = x.Reshape(TensorShape(p.dims));
    if (!r.ok()) return c.Error(r.status().message());
    c.outputs = {*r};
    return absl::OkStatus();
  }
  Tensor out(DT_FLOAT, TensorShape(p.dims));
  const float* in = x.data<float>();
  float* o = out.data<float>();
  const int rank = static_cast<int>(p.dims.size());
  const int64_t inner = p.dims[rank - 1], inner_stride = p.strides[rank - 1];
  const int64_t outer = inner == 0 ? 0 : out.NumElements() / inner;
  // Each outer index (all axes but the last) copies one strided run.
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index r = begin; r < end; ++r) {
      int64_t rest = r, offset = 0;
      for (int i = rank - 2; i >= 0; --i) {
        offset += (rest % p.dims[i]) * p.strides[i];
        rest /= p.dims[i];
      }
      float* dst = o + r * inner;
      if (inner_stride == 1) {  // the last axis stays last: one run
        std::memcpy(dst, in + offset, inner * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < inner; ++j) dst[j] = in[offset + j * inner_stride];
    }
  };
  c.device->parallelFor(outer, Eigen::TensorOpCost(inner * 4, inner * 4, inner), work);
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status AddN(KernelContext& c) {
  Tensor out = c.inputs[0].Copy();
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    if (c.inputs[i].NumElements() != out.NumElements()) return c.Error("inputs differ in size");
    AsVector(out).device(*c.device) = AsVector(out) + AsVector(c.inputs[i]);
  }
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status Reshape(KernelContext& c) {
  std::vector<int64_t> target = GetAttrInts(*c.node, "shape");
  int64_t known = 1, unknown = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] < 0) {
      unknown = i;
    } else {
      known *= target[i];
    }
  }
  int64_t total = c.inputs[0].NumElements();
  if (unknown >= 0) {
    if (known == 0 || total % known != 0) return c.Error(absl::StrCat("cannot reshape ", c.inputs[0].shape().ToString()));
    target[unknown] = total / known;
  }
  absl::StatusOr<Tensor> r = c.inputs[0].Reshape(TensorShape(target));
  if (!r.ok()) return c.Error(r.status().message());
  c.outputs = {*r};
  return absl::OkStatus();
}

absl::Status ReshapeLike(KernelContext& c) {
  absl::StatusOr<Tensor> r = c.inputs[0].Reshape(c.inputs[1].shape());
  if (!r.ok()) return c.Error(r.status().message());
  c.outputs = {*r};
  return absl::OkStatus();
}

absl::Status Concat(KernelContext& c) {
  const TensorShape& s0 = c.inputs[0].shape();
  int axis = NormAxis(GetAttrI(*c.node, "axis", -1), s0.rank());
  std::vector<int64_t> dims = s0.dims();
  dims[axis] = 0;
  for (const Tensor& t : c.inputs) {
    if (t.shape().rank() != s0.rank()) return c.Error("inputs differ in rank");
    dims[axis] += t.shape().dim(axis);
  }
  Tensor out(DT_FLOAT, TensorShape(dims));
  int64_t outer, inner;
  AxisSplit(out.shape(), axis, &outer, &inner);
  int64_t out_row = dims[axis] * inner, offset = 0;
  for (const Tensor& t : c.inputs) {
    int64_t row = t.shape().dim(axis) * inner;
    if (t.NumElements() != outer * row) return c.Error("inputs differ outside the concat axis");
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(out.data<float>() + o * out_row + offset, t.data<float>() + o * row, row * sizeof(float));
    }
    offset += row;
  }
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status ConcatGrad(KernelContext& c) {
  Tensor& dy = c.inputs[0];
  int index = static_cast<int>(GetAttrI(*c.node, "index"));
  int axis = NormAxis(GetAttrI(*c.node, "axis", -1), dy.shape().rank());
  int64_t outer, inner;
  AxisSplit(dy.shape(), axis, &outer, &inner);
  int64_t offset = 0;
  for (int i = 0; i < index; ++i) offset += c.inputs[1 + i].shape().dim(axis) * inner;
  const Tensor& like = c.inputs[1 + index];
  Tensor out(DT_FLOAT, like.shape());
  int64_t row = like.shape().dim(axis) * inner, dy_row = dy.shape().dim(axis) * inner;
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(out.data<float>() + o * row, dy.data<float>() + o * dy_row + offset, row * sizeof(float));
  }
  c.outputs = {out};
  return absl::OkStatus();
}

// SplitMix64's finaliser: a counter-based generator, so element i's draw
// depends on (seed, i) only. The same draw as worker/gpu/gpu_elementwise.cu
// (DropoutKernel), so a step's masks are the same bits on CPU and GPU.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

absl::Status Dropout(KernelContext& c) {
  Tensor& x = c.inputs[0];
  float rate = GetAttrF(*c.node, "rate");
  Tensor mask(DT_FLOAT, x.shape());
  if (!c.training || rate == 0) {
    AsVector(mask).setConstant(1.0f);
    c.outputs = {x, mask};
    return absl::OkStatus();
  }
  // Element i is kept when its 24-bit draw u in [0, 1) is at least `rate`.
  // (A std::mt19937 stream through std::bernoulli_distribution cost about
  // 15 ns an element: a tenth of a training cluster's CPU in a profile.)
  const uint64_t seed = Mix(c.seed ^ std::hash<std::string>()(c.node->name()));
  const float scale = 1.0f / (1.0f - rate);
  float* m = mask.data<float>();
  const int64_t n = mask.NumElements();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = Mix(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1));
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
    m[i] = u >= rate ? scale : 0.0f;
  }
  Tensor y(DT_FLOAT, x.shape());
  AsVector(y).device(*c.device) = AsVector(x) * AsVector(mask);
  c.outputs = {y, mask};
  return absl::OkStatus();
}

absl::Status ConstKernel(KernelContext& c) {
  auto it = c.node->attr().find("value");
  if (it == c.node->attr().end()) return c.Error("no value");
  absl::StatusOr<Tensor> t = Tensor::FromProto(it->second.tensor());
  if (!t.ok()) return c.Error(t.status().message());
  c.outputs = {*t};
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuBasicKernels(KernelRegistry* r) {
  r->Register("Const", ConstKernel);
  r->Register("Identity", [](KernelContext& c) {
    c.outputs = {c.inputs[0]};
    return absl::OkStatus();
  });
  r->Register("MatMul", MatMul);
  r->Register("BiasAdd", BiasAdd);
  r->Register("BiasAddGrad", BiasAddGrad);
  r->Register("Relu", Elementwise1([](KernelContext& c, UMap<1> x, UMap<1> y) {
    y.device(*c.device) = x.cwiseMax(0.0f);
  }));
  r->Register("Sigmoid", Elementwise1([](KernelContext& c, UMap<1> x, UMap<1> y) {
    y.device(*c.device) = x.sigmoid();
  }));
  r->Register("Tanh", Elementwise1([](KernelContext& c, UMap<1> x, UMap<1> y) {
    y.device(*c.device) = x.tanh();
  }));
  r->Register("ReluGrad", Elementwise2([](KernelContext& c, UMap<1> dy, UMap<1> y, UMap<1> dx) {
    dx.device(*c.device) = (y > 0.0f).select(dy, dy.constant(0.0f));
  }));
  r->Register("SigmoidGrad", Elementwise2([](KernelContext& c, UMap<1> dy, UMap<1> y, UMap<1> dx) {
    dx.device(*c.device) = dy * y * (y.constant(1.0f) - y);
  }));
  r->Register("TanhGrad", Elementwise2([](KernelContext& c, UMap<1> dy, UMap<1> y, UMap<1> dx) {
    dx.device(*c.device) = dy * (y.constant(1.0f) - y * y);
  }));
  r->Register("Mul", Elementwise2([](KernelContext& c, UMap<1> a, UMap<1> b, UMap<1> out) {
    out.device(*c.device) = a * b;
  }));
  r->Register("Softmax", Softmax);
  r->Register("SoftmaxGrad", SoftmaxGrad);
  r->Register("LogSoftmax", LogSoftmax);
  r->Register("LogSoftmaxGrad", LogSoftmaxGrad);
  r->Register("Transpose", Transpose);
  r->Register("AddN", AddN);
  r->Register("Reshape", Reshape);
  r->Register("ReshapeLike", ReshapeLike);
  r->Register("ConcatV2", Concat);
  r->Register("ConcatGrad", ConcatGrad);
  r->Register("Dropout", Dropout);
}

}  // namespace psrt
