// GPU kernels: convolution (im2col + cuBLAS, one product per group;
// col2im), max and average pooling,
// embeddings, losses and accuracy. Shape checks mirror kernels_nn.cc; what
// the CPU checks by reading ids and labels is checked on the device and
// reported through the context's error slot.
#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"
#include "worker/gpu/gpu_kernel.h"
#include "common/compute/kernels/kernel_shapes.h"

namespace psrt {
namespace gpu {
namespace {

ConvDims DimsOf(const ConvGeometry& g) {
  return ConvDims{g.n,  g.h,  g.w,  g.c,  g.kh, g.kw,      g.sh,       g.sw,        g.dh,
                  g.dw, g.oh, g.ow, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right, g.group,
                  g.count_include_pad};
}

// Geometry of a (x, kernel, ...) conv node, after checking the kernel fits.
absl::Status ConvInputs(const GpuKernelContext& c, ConvGeometry* g) {
  RETURN_IF_ERROR(ConvGeometryOf(c, c.inputs[0].shape(), c.inputs[1].shape(), g));
  if (c.inputs.size() > 2 && c.inputs[2].NumElements() != g->rows() * g->f) {
    return c.Error(absl::StrCat("dy ", c.inputs[2].shape().ToString(), " does not match the convolution"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Im2ColOf(GpuKernelContext& c, const ConvGeometry& g) {
  ASSIGN_OR_RETURN(Tensor col, c.Output(TensorShape({g.rows(), g.patch()})));
  RETURN_IF_ERROR(c.Check(Im2Col(c.stream(), DimsOf(g), c.inputs[0].data<float>(), col.data<float>())));
  return col;
}

// One cuBLAS product per group: group j's block of col is columns
// [j*p, (j+1)*p) (row stride patch), of the kernel and of y/dy columns
// [j*fg, (j+1)*fg) (row stride f); one group is the whole matrices.
struct GroupBlocks {
  int64_t p, fg;
  int64_t col(int64_t j) const { return j * p; }
  int64_t out(int64_t j) const { return j * fg; }
};
GroupBlocks BlocksOf(const ConvGeometry& g) { return GroupBlocks{g.group_patch(), g.f / g.group}; }

absl::Status Conv2DOp(GpuKernelContext& c) {
  ConvGeometry g;
  RETURN_IF_ERROR(ConvInputs(c, &g));
  ASSIGN_OR_RETURN(Tensor col, Im2ColOf(c, g));
  ASSIGN_OR_RETURN(Tensor y, c.Output(TensorShape({g.n, g.oh, g.ow, g.f})));
  const GroupBlocks b = BlocksOf(g);
  for (int64_t j = 0; j < g.group; ++j) {
    // y_j [rows, fg] = col_j [rows, p] x kernel_j [p, fg]
    PSRT_GPU_CHECK(c, Gemm(c.gpu->blas(), false, false, g.rows(), b.fg, b.p, col.data<float>() + b.col(j), g.patch(),
                           c.inputs[1].data<float>() + b.out(j), g.f, 0.0f, y.data<float>() + b.out(j), g.f));
  }
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status Conv2DBackpropFilterOp(GpuKernelContext& c) {  // (x, kernel, dy)
  ConvGeometry g;
  RETURN_IF_ERROR(ConvInputs(c, &g));
  ASSIGN_OR_RETURN(Tensor col, Im2ColOf(c, g));
  ASSIGN_OR_RETURN(Tensor dk, c.Output(c.inputs[1].shape()));
  const GroupBlocks b = BlocksOf(g);
  for (int64_t j = 0; j < g.group; ++j) {
    // dk_j [p, fg] = col_j^T [p, rows] x dy_j [rows, fg]
    PSRT_GPU_CHECK(c, Gemm(c.gpu->blas(), true, false, b.p, b.fg, g.rows(), col.data<float>() + b.col(j), g.patch(),
                           c.inputs[2].data<float>() + b.out(j), g.f, 0.0f, dk.data<float>() + b.out(j), g.f));
  }
  c.outputs = {dk};
  return absl::OkStatus();
}

absl::Status Conv2DBackpropInputOp(GpuKernelContext& c) {  // (x, kernel, dy)
  ConvGeometry g;
  RETURN_IF_ERROR(ConvInputs(c, &g));
  ASSIGN_OR_RETURN(Tensor dcol, c.Output(TensorShape({g.rows(), g.patch()})));
  const GroupBlocks b = BlocksOf(g);
  for (int64_t j = 0; j < g.group; ++j) {
    // dcol_j [rows, p] = dy_j [rows, fg] x kernel_j^T [fg, p]
    PSRT_GPU_CHECK(c, Gemm(c.gpu->blas(), false, true, g.rows(), b.p, b.fg, c.inputs[2].data<float>() + b.out(j), g.f,
                           c.inputs[1].data<float>() + b.out(j), g.f, 0.0f, dcol.data<float>() + b.col(j), g.patch()));
  }
  ASSIGN_OR_RETURN(Tensor dx, c.Output(c.inputs[0].shape()));
  PSRT_GPU_CHECK(c, Col2Im(c.stream(), DimsOf(g), dcol.data<float>(), dx.data<float>()));
  c.outputs = {dx};
  return absl::OkStatus();
}

absl::Status PoolGeometry(const GpuKernelContext& c, const Tensor& x, ConvGeometry* g) {
  if (x.shape().rank() != 4) return c.Error(absl::StrCat("input must be NHWC, got ", x.shape().ToString()));
  return Geometry(c, x.shape(), 0, 0, x.shape().dim(3), g);
}

absl::Status MaxPoolOp(GpuKernelContext& c) {
  ConvGeometry g;
  RETURN_IF_ERROR(PoolGeometry(c, c.inputs[0], &g));
  ASSIGN_OR_RETURN(Tensor y, c.Output(TensorShape({g.n, g.oh, g.ow, g.c})));
  PSRT_GPU_CHECK(c, gpu::MaxPool(c.stream(), DimsOf(g), c.inputs[0].data<float>(), y.data<float>()));
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status MaxPoolGradOp(GpuKernelContext& c) {  // (x, y, dy)
  ConvGeometry g;
  RETURN_IF_ERROR(PoolGeometry(c, c.inputs[0], &g));
  if (c.inputs[2].NumElements() != g.rows() * g.c) return c.Error("dy does not match the pooled shape");
  ASSIGN_OR_RETURN(Tensor dx, c.Output(c.inputs[0].shape()));
  PSRT_GPU_CHECK(c, gpu::MaxPoolGrad(c.stream(), DimsOf(g), c.inputs[0].data<float>(), c.inputs[2].data<float>(),
                                     dx.data<float>()));
  c.outputs = {dx};
  return absl::OkStatus();
}

absl::Status AvgPoolOp(GpuKernelContext& c) {
  ConvGeometry g;
  RETURN_IF_ERROR(PoolGeometry(c, c.inputs[0], &g));
  if (g.dh != 1 || g.dw != 1) return c.Error("dilated average pooling is not supported");
  ASSIGN_OR_RETURN(Tensor y, c.Output(TensorShape({g.n, g.oh, g.ow, g.c})));
  PSRT_GPU_CHECK(c, gpu::AvgPool(c.stream(), DimsOf(g), c.inputs[0].data<float>(), y.data<float>()));
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status AvgPoolGradOp(GpuKernelContext& c) {  // (dy, x)
  ConvGeometry g;
  RETURN_IF_ERROR(PoolGeometry(c, c.inputs[1], &g));
  if (g.dh != 1 || g.dw != 1) return c.Error("dilated average pooling is not supported");
  if (c.inputs[0].NumElements() != g.rows() * g.c) return c.Error("dy does not match the pooled shape");
  ASSIGN_OR_RETURN(Tensor dx, c.Output(c.inputs[1].shape()));
  PSRT_GPU_CHECK(c, gpu::AvgPoolGrad(c.stream(), DimsOf(g), c.inputs[0].data<float>(), dx.data<float>()));
  c.outputs = {dx};
  return absl::OkStatus();
}

absl::Status CheckIds(const GpuKernelContext& c, const Tensor& rows, std::initializer_list<int> id_inputs) {
  if (rows.shape().rank() != 2) return c.Error(absl::StrCat("rows must be a matrix, got ", rows.shape().ToString()));
  for (int i : id_inputs) {
    if (c.inputs[i].dtype() != DT_INT64) return c.Error(absl::StrCat("input ", i, " must be int64"));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingLookupOp(GpuKernelContext& c) {  // (rows, index)
  Tensor& rows = c.inputs[0];
  Tensor& index = c.inputs[1];
  RETURN_IF_ERROR(CheckIds(c, rows, {1}));
  int64_t d = rows.shape().dim(1), b = index.NumElements();
  std::vector<int64_t> dims = index.shape().dims();  // ids of any rank: [..., d]
  dims.push_back(d);
  ASSIGN_OR_RETURN(Tensor y, c.Output(TensorShape(dims)));
  PSRT_GPU_CHECK(c, gpu::EmbeddingLookup(c.stream(), rows.data<float>(), rows.shape().dim(0), d,
                                         index.data<int64_t>(), b, y.data<float>(), c.error_slot));
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status EmbeddingLookupGradOp(GpuKernelContext& c) {  // (dy, index, rows)
  Tensor& index = c.inputs[1];
  Tensor& rows = c.inputs[2];
  RETURN_IF_ERROR(CheckIds(c, rows, {1}));
  int64_t d = rows.shape().dim(1), b = index.NumElements();
  if (c.inputs[0].NumElements() != b * d) return c.Error("dy does not match the ids");
  ASSIGN_OR_RETURN(Tensor dr, c.Output(rows.shape()));
  PSRT_GPU_CHECK(c, gpu::EmbeddingLookupGrad(c.stream(), c.inputs[0].data<float>(), index.data<int64_t>(), b,
                                             rows.shape().dim(0), d, dr.data<float>(), c.error_slot));
  c.outputs = {dr};
  return absl::OkStatus();
}

bool Mean(const GpuKernelContext& c) { return GetAttrS(*c.node, "combiner", "sum") == "mean"; }

absl::Status EmbeddingBagOp(GpuKernelContext& c) {  // (rows, index, row_splits)
  Tensor& rows = c.inputs[0];
  Tensor& index = c.inputs[1];
  Tensor& splits = c.inputs[2];
  RETURN_IF_ERROR(CheckIds(c, rows, {1, 2}));
  int64_t d = rows.shape().dim(1), bags = splits.NumElements() - 1;
  if (bags < 0) return c.Error("row_splits do not cover the ids");
  ASSIGN_OR_RETURN(Tensor y, c.Output(TensorShape({bags, d})));
  PSRT_GPU_CHECK(c, gpu::EmbeddingBag(c.stream(), rows.data<float>(), rows.shape().dim(0), d, index.data<int64_t>(),
                                      index.NumElements(), splits.data<int64_t>(), bags, Mean(c), y.data<float>(),
                                      c.error_slot));
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status EmbeddingBagGradOp(GpuKernelContext& c) {  // (dy, index, row_splits, rows)
  Tensor& index = c.inputs[1];
  Tensor& splits = c.inputs[2];
  Tensor& rows = c.inputs[3];
  RETURN_IF_ERROR(CheckIds(c, rows, {1, 2}));
  int64_t d = rows.shape().dim(1), bags = splits.NumElements() - 1;
  if (bags < 0 || c.inputs[0].NumElements() != bags * d) return c.Error("dy does not match the row splits");
  ASSIGN_OR_RETURN(Tensor dr, c.Output(rows.shape()));
  PSRT_GPU_CHECK(c, gpu::EmbeddingBagGrad(c.stream(), c.inputs[0].data<float>(), index.data<int64_t>(),
                                          index.NumElements(), splits.data<int64_t>(), bags, rows.shape().dim(0), d,
                                          Mean(c), dr.data<float>(), c.error_slot));
  c.outputs = {dr};
  return absl::OkStatus();
}

absl::StatusOr<Labels> LabelsOf(const GpuKernelContext& c, const Tensor& labels) {
  if (labels.dtype() != DT_INT64 && labels.dtype() != DT_FLOAT) return c.Error("labels must be int64 or float");
  return Labels{labels.raw_data(), labels.dtype() == DT_INT64};
}

// (logits, labels) -> scalar, or (dloss, logits, labels) -> dlogits.
GpuKernel LossKernel(LossOp op, bool grad) {
  return [op, grad](GpuKernelContext& c) -> absl::Status {
    const Tensor& logits = c.inputs[grad ? 1 : 0];
    const Tensor& labels = c.inputs[grad ? 2 : 1];
    int64_t rows = logits.NumElements(), n = 1;
    if (op == LossOp::kSoftmaxXent) {
      if (logits.shape().rank() != 2 || labels.NumElements() != logits.shape().dim(0)) {
        return c.Error(absl::StrCat("logits ", logits.shape().ToString(), " and labels ", labels.shape().ToString()));
      }
      rows = logits.shape().dim(0);
      n = logits.shape().dim(1);
    } else if (labels.NumElements() != rows) {
      return c.Error("predictions and labels differ in size");
    }
    ASSIGN_OR_RETURN(Labels l, LabelsOf(c, labels));
    const float smoothing = op == LossOp::kMse ? 0.0f : GetAttrF(*c.node, "label_smoothing", 0.0f);
    if (grad) {
      ASSIGN_OR_RETURN(Tensor dx, c.Output(logits.shape()));
      PSRT_GPU_CHECK(c, LossGrad(c.stream(), op, c.inputs[0].data<float>(), logits.data<float>(), l, rows, n,
                                 smoothing, dx.data<float>(), c.error_slot));
      c.outputs = {dx};
    } else {
      ASSIGN_OR_RETURN(Tensor out, c.Output(TensorShape()));
      PSRT_GPU_CHECK(c, Loss(c.stream(), op, logits.data<float>(), l, rows, n, smoothing, out.data<float>(),
                             c.error_slot));
      c.outputs = {out};
    }
    return absl::OkStatus();
  };
}

// The metric ops (Accuracy, TopKAccuracy, ...: see
// common/compute/metric_stats.h) run their CPU kernel on the host: they read
// a batch's logits and labels once and give a few counts, so the copies
// cost little next to the step, and the GPU's counts are the CPU's exactly.
absl::Status MetricOnHost(GpuKernelContext& c) {
  const Kernel* cpu = KernelRegistry::Cpu().Find(c.node->op());
  if (cpu == nullptr) return c.Error("no CPU kernel");
  KernelContext host;
  host.node = c.node;
  host.training = c.training;
  host.seed = c.seed;
  for (const Tensor& t : c.inputs) {
    ASSIGN_OR_RETURN(Tensor h, c.gpu->Download(t));
    host.inputs.push_back(std::move(h));
  }
  RETURN_IF_ERROR((*cpu)(host));
  c.outputs.clear();
  for (const Tensor& t : host.outputs) {
    ASSIGN_OR_RETURN(Tensor d, c.gpu->Upload(t));
    c.outputs.push_back(std::move(d));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterGpuNnKernels(GpuKernelRegistry* r) {
  r->Register("Conv2D", Conv2DOp);
  r->Register("Conv2DBackpropFilter", Conv2DBackpropFilterOp);
  r->Register("Conv2DBackpropInput", Conv2DBackpropInputOp);
  r->Register("MaxPool", MaxPoolOp);
  r->Register("MaxPoolGrad", MaxPoolGradOp);
  r->Register("AvgPool", AvgPoolOp);
  r->Register("AvgPoolGrad", AvgPoolGradOp);
  r->Register("EmbeddingLookup", EmbeddingLookupOp);
  r->Register("EmbeddingLookupGrad", EmbeddingLookupGradOp);
  r->Register("EmbeddingBag", EmbeddingBagOp);
  r->Register("EmbeddingBagGrad", EmbeddingBagGradOp);
  r->Register("SoftmaxCrossEntropy", LossKernel(LossOp::kSoftmaxXent, false));
  r->Register("SoftmaxCrossEntropyGrad", LossKernel(LossOp::kSoftmaxXent, true));
  r->Register("SigmoidCrossEntropy", LossKernel(LossOp::kSigmoidXent, false));
  r->Register("SigmoidCrossEntropyGrad", LossKernel(LossOp::kSigmoidXent, true));
  r->Register("MeanSquaredError", LossKernel(LossOp::kMse, false));
  r->Register("MeanSquaredErrorGrad", LossKernel(LossOp::kMse, true));
  for (const char* op : {"Accuracy", "TopKAccuracy", "MeanAbsoluteError", "Precision", "Recall", "Auc"}) {
    r->Register(op, MetricOnHost);
  }
}

}  // namespace gpu
}  // namespace psrt
