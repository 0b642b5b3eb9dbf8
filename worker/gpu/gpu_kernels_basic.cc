// GPU kernels: matrix products (cuBLAS, batched too), element-wise ops,
// softmax, transpose, slices, concatenation, dropout. Shape checks mirror
// kernels_basic.cc.
#include <algorithm>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"
#include "worker/gpu/gpu_kernel.h"
#include "common/compute/kernels/kernel_shapes.h"

namespace psrt {
namespace gpu {

absl::StatusOr<Tensor> GpuKernelContext::Output(TensorShape shape, DataType dtype) const {
  absl::StatusOr<Tensor> t = gpu->Allocate(dtype, std::move(shape));
  if (!t.ok()) return Error(t.status().message());
  return t;
}

absl::Status GpuKernelContext::Check(GpuError e) const {
  if (e == nullptr) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("node ", node->name(), " (", node->op(), ") on the GPU: ", e));
}

const GpuKernelRegistry& GpuKernelRegistry::Get() {
  static const GpuKernelRegistry* r = [] {
    auto* reg = new GpuKernelRegistry();
    RegisterGpuBasicKernels(reg);
    RegisterGpuNnKernels(reg);
    RegisterGpuMathKernels(reg);
    return reg;
  }();
  return *r;
}

namespace {

const float* In(GpuKernelContext& c, int i) { return c.inputs[i].data<float>(); }

absl::Status MatMulOp(GpuKernelContext& c) {
  Tensor& a = c.inputs[0];
  Tensor& b = c.inputs[1];
  MatMulDims d;
  RETURN_IF_ERROR(MatMulShape(c, a.shape(), b.shape(), &d));
  ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape({d.m, d.n})));
  PSRT_GPU_CHECK(c, Gemm(c.gpu->blas(), d.ta, d.tb, d.m, d.n, d.k, a.data<float>(), a.shape().dim(1),
                         b.data<float>(), b.shape().dim(1), 0.0f, out.data<float>(), d.n));
  c.outputs = {out};
  return absl::OkStatus();
}

// BatchMatMul(a, b) with adj_x / adj_y: a [..., M, K] (its last two axes
// swapped under adj_x), b [..., K, N] with a's batch dims (last two
// swapped under adj_y), rank 3 or more as the CPU kernel takes them (a
// product by one shared matrix is imported as a MatMul of the flattened
// rows). Output [..., M, N].
absl::Status BatchMatMulOp(GpuKernelContext& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const int r = a.shape().rank(), rb = b.shape().rank();
  if (r < 3 || rb != r) {
    return c.Error(absl::StrCat("needs two inputs of the same rank >= 3, got ", a.shape().ToString(), " and ",
                                b.shape().ToString()));
  }
  const bool ax = GetAttrB(*c.node, "adj_x"), ay = GetAttrB(*c.node, "adj_y");
  const int64_t a0 = a.shape().dim(r - 2), a1 = a.shape().dim(r - 1);
  const int64_t b0 = b.shape().dim(rb - 2), b1 = b.shape().dim(rb - 1);
  const int64_t m = ax ? a1 : a0, k = ax ? a0 : a1, n = ay ? b0 : b1;
  if ((ay ? b1 : b0) != k) {
    return c.Error(absl::StrCat("inner dimensions differ: ", a.shape().ToString(), " x ", b.shape().ToString()));
  }
  std::vector<int64_t> dims(a.shape().dims().begin(), a.shape().dims().end() - 2);
  if (!std::equal(dims.begin(), dims.end(), b.shape().dims().begin())) {
    return c.Error(absl::StrCat("batch dimensions differ: ", a.shape().ToString(), " x ", b.shape().ToString()));
  }
  int64_t batch = 1;
  for (int64_t d : dims) batch *= d;
  dims.push_back(m);
  dims.push_back(n);
  ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape(dims)));
  const GemmBatch g{batch, m * k, k * n, m * n};
  PSRT_GPU_CHECK(c, GemmStridedBatched(c.gpu->blas(), ax, ay, m, n, k, a.data<float>(), a1, b.data<float>(), b1,
                                       out.data<float>(), n, g));
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status BiasAddOp(GpuKernelContext& c) {
  Tensor& x = c.inputs[0];
  int64_t n = c.inputs[1].NumElements();
  if (x.shape().rank() == 0 || x.shape().dim(x.shape().rank() - 1) != n) {
    return c.Error(absl::StrCat("bias ", c.inputs[1].shape().ToString(), " does not match ", x.shape().ToString()));
  }
  ASSIGN_OR_RETURN(Tensor out, c.Output(x.shape()));
  PSRT_GPU_CHECK(c, gpu::BiasAdd(c.stream(), In(c, 0), In(c, 1), out.data<float>(), x.NumElements() / n, n));
  c.outputs = {out};
  return absl::OkStatus();
}

// Rows and row length of a tensor seen as [rows, last dim].
absl::Status LastDim(const GpuKernelContext& c, const Tensor& t, int64_t* rows, int64_t* n) {
  if (t.shape().rank() == 0) return c.Error("needs at least one dimension");
  *n = t.shape().dim(t.shape().rank() - 1);
  *rows = *n == 0 ? 0 : t.NumElements() / *n;
  return absl::OkStatus();
}

absl::Status BiasAddGradOp(GpuKernelContext& c) {
  int64_t rows, n;
  RETURN_IF_ERROR(LastDim(c, c.inputs[0], &rows, &n));
  ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape({n})));
  PSRT_GPU_CHECK(c, ColumnSum(c.stream(), In(c, 0), out.data<float>(), rows, n));
  c.outputs = {out};
  return absl::OkStatus();
}

GpuKernel UnaryKernel(UnaryOp op) {
  return [op](GpuKernelContext& c) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[0].shape()));
    PSRT_GPU_CHECK(c, Unary(c.stream(), op, In(c, 0), out.data<float>(), out.NumElements()));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

GpuKernel BinaryKernel(BinaryOp op) {
  return [op](GpuKernelContext& c) -> absl::Status {
    Tensor& a = c.inputs[0];
    Tensor& b = c.inputs[1];
    if (a.NumElements() != b.NumElements()) {
      return c.Error(absl::StrCat("shapes differ: ", a.shape().ToString(), " and ", b.shape().ToString()));
    }
    ASSIGN_OR_RETURN(Tensor out, c.Output(a.shape()));
    PSRT_GPU_CHECK(c, Binary(c.stream(), op, In(c, 0), In(c, 1), out.data<float>(), out.NumElements()));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

// Pow's exponent attr; a graph without one is refused rather than guessed.
absl::StatusOr<float> Exponent(const GpuKernelContext& c) {
  if (c.node->attr().count("exponent") == 0) return c.Error("has no exponent attr");
  return GetAttrF(*c.node, "exponent");
}

absl::Status PowOp(GpuKernelContext& c) {
  ASSIGN_OR_RETURN(float e, Exponent(c));
  ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[0].shape()));
  PSRT_GPU_CHECK(c, gpu::Pow(c.stream(), In(c, 0), out.data<float>(), out.NumElements(), e));
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status PowGradOp(GpuKernelContext& c) {  // (dy, x)
  ASSIGN_OR_RETURN(float e, Exponent(c));
  if (c.inputs[0].NumElements() != c.inputs[1].NumElements()) {
    return c.Error(absl::StrCat("dy ", c.inputs[0].shape().ToString(), " and x ", c.inputs[1].shape().ToString(),
                                " differ in size"));
  }
  ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[1].shape()));
  PSRT_GPU_CHECK(c, gpu::PowGrad(c.stream(), In(c, 0), In(c, 1), out.data<float>(), out.NumElements(), e));
  c.outputs = {out};
  return absl::OkStatus();
}

// Softmax and LogSoftmax over the last axis, x -> y.
using RowFn = GpuError (*)(void*, const float*, float*, int64_t, int64_t);
GpuKernel RowKernel(RowFn f) {
  return [f](GpuKernelContext& c) -> absl::Status {
    int64_t rows, n;
    RETURN_IF_ERROR(LastDim(c, c.inputs[0], &rows, &n));
    ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[0].shape()));
    PSRT_GPU_CHECK(c, f(c.stream(), In(c, 0), out.data<float>(), rows, n));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

// Their gradients, (dy, y) -> dx.
using RowGradFn = GpuError (*)(void*, const float*, const float*, float*, int64_t, int64_t);
GpuKernel RowGradKernel(RowGradFn f) {
  return [f](GpuKernelContext& c) -> absl::Status {
    int64_t rows, n;
    RETURN_IF_ERROR(LastDim(c, c.inputs[1], &rows, &n));
    if (c.inputs[0].NumElements() != c.inputs[1].NumElements()) return c.Error("dy and y differ in size");
    ASSIGN_OR_RETURN(Tensor out, c.Output(c.inputs[1].shape()));
    PSRT_GPU_CHECK(c, f(c.stream(), In(c, 0), In(c, 1), out.data<float>(), rows, n));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

absl::Status TransposeOp(GpuKernelContext& c) {
  Tensor& x = c.inputs[0];
  TransposePlan p;
  RETURN_IF_ERROR(PlanTranspose(c, x.shape(), &p));
  if (p.in_order) {  // the same bytes: relabel the buffer
    absl::StatusOr<Tensor> r = x.Reshape(TensorShape(p.dims));
    if (!r.ok()) return c.Error(r.status().message());
    c.outputs = {*r};
    return absl::OkStatus();
  }
  if (p.dims.size() > static_cast<size_t>(kMaxTransposeRank)) return c.Error("rank above 8");
  TransposeDims d;
  d.rank = static_cast<int>(p.dims.size());
  for (int i = 0; i < d.rank; ++i) {
    d.dims[i] = p.dims[i];
    d.strides[i] = p.strides[i];
  }
  ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape(p.dims)));
  PSRT_GPU_CHECK(c, gpu::Transpose(c.stream(), In(c, 0), out.data<float>(), d, out.NumElements()));
  c.outputs = {out};
  return absl::OkStatus();
}

// The window of a Slice / SliceGrad node (begin and size attrs, one per
// axis of x; size -1: to the end) inside x: its shape, x's cell at its
// start, and a walk of it with x's strides, coalesced (axes of size 1 go;
// an axis merges into the one before where it is taken whole).
struct SliceWindow {
  std::vector<int64_t> shape;
  int64_t offset = 0;
  TransposeDims walk;
};

absl::Status PlanSlice(const GpuKernelContext& c, const TensorShape& x, SliceWindow* w) {
  const std::vector<int64_t> begin = GetAttrInts(*c.node, "begin"), size = GetAttrInts(*c.node, "size");
  const int r = x.rank();
  if (begin.size() != static_cast<size_t>(r) || size.size() != static_cast<size_t>(r)) {
    return c.Error(absl::StrCat("begin (", begin.size(), " values) and size (", size.size(),
                                " values) need one per axis of x ", x.ToString()));
  }
  std::vector<int64_t> stride(r, 1);
  for (int i = r - 1; i > 0; --i) stride[i - 1] = stride[i] * x.dim(i);
  std::vector<int64_t> dims, steps;
  w->shape.clear();
  w->offset = 0;
  for (int i = 0; i < r; ++i) {
    const int64_t b = begin[i], dim = x.dim(i);
    if (b < 0 || b > dim) return c.Error(absl::StrCat("begin[", i, "] = ", b, " is outside axis ", i, " of x ", x.ToString()));
    const int64_t s = size[i] == -1 ? dim - b : size[i];
    if (s < 0 || s > dim - b) {
      return c.Error(absl::StrCat("size[", i, "] = ", size[i], " from begin ", b, " does not fit axis ", i, " of x ",
                                  x.ToString()));
    }
    w->shape.push_back(s);
    w->offset += b * stride[i];
    if (s == 1) continue;
    if (!steps.empty() && steps.back() == s * stride[i]) {
      dims.back() *= s;
      steps.back() = stride[i];
    } else {
      dims.push_back(s);
      steps.push_back(stride[i]);
    }
  }
  if (dims.empty()) {  // one cell (or a scalar)
    dims.push_back(1);
    steps.push_back(1);
  }
  if (dims.size() > static_cast<size_t>(kMaxTransposeRank)) {
    return c.Error(absl::StrCat("slice walks ", dims.size(), " axes (at most ", kMaxTransposeRank, ")"));
  }
  w->walk.rank = static_cast<int>(dims.size());
  std::copy(dims.begin(), dims.end(), w->walk.dims);
  std::copy(steps.begin(), steps.end(), w->walk.strides);
  return absl::OkStatus();
}

absl::Status SliceOp(GpuKernelContext& c) {
  const Tensor& x = c.inputs[0];
  SliceWindow w;
  RETURN_IF_ERROR(PlanSlice(c, x.shape(), &w));
  ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape(w.shape)));
  if (out.NumElements() > 0) {
    PSRT_GPU_CHECK(c, gpu::Transpose(c.stream(), In(c, 0) + w.offset, out.data<float>(), w.walk, out.NumElements()));
  }
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status SliceGradOp(GpuKernelContext& c) {  // (dy, x) -> dx: zeros, dy at begin
  const Tensor& dy = c.inputs[0];
  const Tensor& x = c.inputs[1];
  SliceWindow w;
  RETURN_IF_ERROR(PlanSlice(c, x.shape(), &w));
  if (dy.shape().dims() != w.shape) {
    return c.Error(absl::StrCat("dy ", dy.shape().ToString(), " is not the slice ", TensorShape(w.shape).ToString(),
                                " of x ", x.shape().ToString()));
  }
  ASSIGN_OR_RETURN(Tensor out, c.Output(x.shape()));
  PSRT_GPU_CHECK(c, Zero(c.stream(), out.data<float>(), out.TotalBytes()));
  if (dy.NumElements() > 0) {
    PSRT_GPU_CHECK(c, StridedScatter(c.stream(), In(c, 0), out.data<float>() + w.offset, w.walk, dy.NumElements()));
  }
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status AddNOp(GpuKernelContext& c) {
  const Tensor& first = c.inputs[0];
  for (const Tensor& t : c.inputs) {
    if (t.NumElements() != first.NumElements()) return c.Error("inputs differ in size");
  }
  ASSIGN_OR_RETURN(Tensor out, c.Output(first.shape()));
  float* o = out.data<float>();
  if (c.inputs.size() == 1) {
    PSRT_GPU_CHECK(c, CopyOnDevice(c.stream(), o, In(c, 0), out.TotalBytes()));
  } else {
    PSRT_GPU_CHECK(c, Binary(c.stream(), BinaryOp::kAdd, In(c, 0), In(c, 1), o, out.NumElements()));
    for (size_t i = 2; i < c.inputs.size(); ++i) {
      PSRT_GPU_CHECK(c, Binary(c.stream(), BinaryOp::kAdd, o, In(c, i), o, out.NumElements()));
    }
  }
  c.outputs = {out};
  return absl::OkStatus();
}

// Each input is `outer` runs of row floats placed side by side in the
// output's rows: one strided device copy per input.
absl::Status ConcatOp(GpuKernelContext& c) {
  const TensorShape& s0 = c.inputs[0].shape();
  int axis = NormAxis(GetAttrI(*c.node, "axis", -1), s0.rank());
  if (axis < 0 || axis >= s0.rank()) return c.Error("axis out of range");
  std::vector<int64_t> dims = s0.dims();
  dims[axis] = 0;
  for (const Tensor& t : c.inputs) {
    if (t.shape().rank() != s0.rank()) return c.Error("inputs differ in rank");
    dims[axis] += t.shape().dim(axis);
  }
  ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape(dims)));
  int64_t outer, inner;
  AxisSplit(out.shape(), axis, &outer, &inner);
  const size_t f = sizeof(float);
  int64_t out_row = dims[axis] * inner, offset = 0;
  for (const Tensor& t : c.inputs) {
    int64_t row = t.shape().dim(axis) * inner;
    if (t.NumElements() != outer * row) return c.Error("inputs differ outside the concat axis");
    PSRT_GPU_CHECK(c, CopyRows(c.stream(), out.data<float>() + offset, out_row * f, t.data<float>(), row * f,
                               row * f, outer));
    offset += row;
  }
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status ConcatGradOp(GpuKernelContext& c) {
  Tensor& dy = c.inputs[0];
  int index = static_cast<int>(GetAttrI(*c.node, "index"));
  int axis = NormAxis(GetAttrI(*c.node, "axis", -1), dy.shape().rank());
  if (index < 0 || 1 + index >= static_cast<int>(c.inputs.size())) return c.Error("index out of range");
  if (axis < 0 || axis >= dy.shape().rank()) return c.Error("axis out of range");
  int64_t outer, inner;
  AxisSplit(dy.shape(), axis, &outer, &inner);
  int64_t offset = 0;
  for (int i = 0; i < index; ++i) offset += c.inputs[1 + i].shape().dim(axis) * inner;
  const Tensor& like = c.inputs[1 + index];
  ASSIGN_OR_RETURN(Tensor out, c.Output(like.shape()));
  const size_t f = sizeof(float);
  int64_t row = like.shape().dim(axis) * inner, dy_row = dy.shape().dim(axis) * inner;
  if (offset + row > dy_row || outer * dy_row != dy.NumElements()) return c.Error("inputs do not tile dy");
  PSRT_GPU_CHECK(c, CopyRows(c.stream(), out.data<float>(), row * f, dy.data<float>() + offset, dy_row * f,
                             row * f, outer));
  c.outputs = {out};
  return absl::OkStatus();
}

// The mask comes from a counter-based hash of (step seed, node, element),
// the same draw as the CPU kernel's (kernels_basic.cc): the same bits.
absl::Status DropoutOp(GpuKernelContext& c) {
  Tensor& x = c.inputs[0];
  float rate = GetAttrF(*c.node, "rate");
  ASSIGN_OR_RETURN(Tensor mask, c.Output(x.shape()));
  if (!c.training || rate == 0) {
    PSRT_GPU_CHECK(c, Fill(c.stream(), mask.data<float>(), 1.0f, mask.NumElements()));
    c.outputs = {x, mask};
    return absl::OkStatus();
  }
  if (!(rate > 0 && rate < 1)) return c.Error(absl::StrCat("rate ", rate, " is not in [0, 1)"));
  ASSIGN_OR_RETURN(Tensor y, c.Output(x.shape()));
  uint64_t seed = c.seed ^ std::hash<std::string>()(c.node->name());
  PSRT_GPU_CHECK(c, gpu::Dropout(c.stream(), In(c, 0), y.data<float>(), mask.data<float>(), x.NumElements(), rate,
                                 seed));
  c.outputs = {y, mask};
  return absl::OkStatus();
}

// Identity, Reshape and ReshapeLike only relabel the buffer: the CPU
// kernels never touch the data, so they serve device tensors too.
GpuKernel ShapeOnly(const std::string& op) {
  const Kernel* k = KernelRegistry::Cpu().Find(op);
  return [k](GpuKernelContext& c) { return (*k)(c); };
}

}  // namespace

void RegisterGpuBasicKernels(GpuKernelRegistry* r) {
  for (const char* op : {"Identity", "Reshape", "ReshapeLike"}) r->Register(op, ShapeOnly(op));
  r->Register("MatMul", MatMulOp);
  r->Register("BatchMatMul", BatchMatMulOp);
  r->Register("BiasAdd", BiasAddOp);
  r->Register("BiasAddGrad", BiasAddGradOp);
  r->Register("Relu", UnaryKernel(UnaryOp::kRelu));
  r->Register("Sigmoid", UnaryKernel(UnaryOp::kSigmoid));
  r->Register("Tanh", UnaryKernel(UnaryOp::kTanh));
  r->Register("ReluGrad", BinaryKernel(BinaryOp::kReluGrad));
  r->Register("SigmoidGrad", BinaryKernel(BinaryOp::kSigmoidGrad));
  r->Register("TanhGrad", BinaryKernel(BinaryOp::kTanhGrad));
  r->Register("Erf", UnaryKernel(UnaryOp::kErf));
  r->Register("ErfGrad", BinaryKernel(BinaryOp::kErfGrad));
  r->Register("Sqrt", UnaryKernel(UnaryOp::kSqrt));
  r->Register("SqrtGrad", BinaryKernel(BinaryOp::kSqrtGrad));
  r->Register("Gelu", UnaryKernel(UnaryOp::kGelu));
  r->Register("GeluGrad", BinaryKernel(BinaryOp::kGeluGrad));
  r->Register("Pow", PowOp);
  r->Register("PowGrad", PowGradOp);
  r->Register("Mul", BinaryKernel(BinaryOp::kMul));
  r->Register("Softmax", RowKernel(gpu::Softmax));
  r->Register("SoftmaxGrad", RowGradKernel(gpu::SoftmaxGrad));
  r->Register("LogSoftmax", RowKernel(gpu::LogSoftmax));
  r->Register("LogSoftmaxGrad", RowGradKernel(gpu::LogSoftmaxGrad));
  r->Register("Transpose", TransposeOp);
  r->Register("Slice", SliceOp);
  r->Register("SliceGrad", SliceGradOp);
  r->Register("AddN", AddNOp);
  r->Register("ConcatV2", ConcatOp);
  r->Register("ConcatGrad", ConcatGradOp);
  r->Register("Dropout", DropoutOp);
  // Const is not here: the executor uploads constants once, at Create.
}

}  // namespace gpu
}  // namespace psrt
