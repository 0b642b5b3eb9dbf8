// Convolution, pooling, embeddings, losses and metrics: shapes and gradients.
#include "common/graph/op_registry.h"
#include "common/graph/shape_util.h"
#include "common/graph/window.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

using Grads = absl::StatusOr<std::vector<std::string>>;


// Output shape of a window op on NHWC input x with a kh x kw kernel (0:
// the pool's ksize attrs) and c_out channels.
absl::Status Window(const NodeDef& n, const Shape& x, int64_t kh, int64_t kw, int64_t c_out, Shape* out) {
  RETURN_IF_ERROR(RequireRank(n, x, 4, "input (NHWC)"));
  Window2D w;
  if (absl::Status s = ReadWindow(n, kh, kw, &w); !s.ok()) return ShapeError(n, s.message());
  int64_t h, wd;
  WindowOut(&w, x[1], x[2], &h, &wd);
  if ((x[1] >= 0 && h <= 0) || (x[2] >= 0 && wd <= 0)) {
    return ShapeError(n, absl::StrCat("window ", w.kh, "x", w.kw, " does not fit input ", ShapeString(x)));
  }
  *out = {x[0], h, wd, c_out};
  return absl::OkStatus();
}

// The window attrs of a node, for its gradient ops.
Attrs WindowAttrs(const NodeDef& n) {
  Attrs a;
  for (const char* k : {"stride", "strides", "dilations", "padding", "pads", "group", "ksize", "ksizes",
                        "count_include_pad"}) {
    auto it = n.attr().find(k);
    if (it != n.attr().end()) a[k] = it->second;
  }
  return a;
}

// The (predictions, labels) of a loss or a metric agree in batch size;
// `class_logits`: they are logits [batch, classes] and labels [batch].
absl::Status CheckPredictionsAndLabels(const NodeDef& n, const std::vector<Shape>& in, bool class_logits) {
  if (in[0].empty() || in[1].empty() || !DimsAgree(in[0][0], in[1][0])) {
    return ShapeError(n, absl::StrCat("predictions ", ShapeString(in[0]), " and labels ", ShapeString(in[1]),
                                      " differ in batch size"));
  }
  if (class_logits && (in[0].size() != 2 || in[1].size() != 1)) {
    return ShapeError(n, absl::StrCat("needs logits [batch, classes] and labels [batch], got ", ShapeString(in[0]),
                                      " and ", ShapeString(in[1])));
  }
  return absl::OkStatus();
}

// A metric of (logits, labels): a float vector of sufficient statistics
// (see common/compute/metric_stats.h), 2 long, or 4 per threshold for Auc.
OpDef Metric(const std::string& name) {
  OpDef d;
  d.name = name;
  d.num_inputs = 2;
  d.shape = [name](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
    RETURN_IF_ERROR(CheckPredictionsAndLabels(n, in, /*class_logits=*/name == "TopKAccuracy"));
    if (name != "Auc") {
      *out = {{2}};
      return absl::OkStatus();
    }
    const int64_t t = GetAttrI(n, "num_thresholds", 200);
    if (t < 2) return ShapeError(n, absl::StrCat("num_thresholds is ", t, ", needs at least 2"));
    *out = {{4 * t}};
    return absl::OkStatus();
  };
  return d;
}

// A scalar loss of (logits, labels).
OpDef Loss(const std::string& name, const std::string& grad_op) {
  OpDef d;
  d.name = name;
  d.num_inputs = 2;
  d.shape = [name](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
    RETURN_IF_ERROR(CheckPredictionsAndLabels(n, in, /*class_logits=*/name == "SoftmaxCrossEntropy"));
    *out = {{}};
    return absl::OkStatus();
  };
  if (!grad_op.empty()) {
    d.grad = [grad_op](const GradContext& c) -> Grads {
      // The gradient smooths the labels as the loss did.
      Attrs a;
      auto it = c.node->attr().find("label_smoothing");
      if (it != c.node->attr().end()) a["label_smoothing"] = it->second;
      return std::vector<std::string>{c.Add(grad_op, "dlogits", {c.dy[0], c.in(0), c.in(1)}, a), ""};
    };
  }
  return d;
}

}  // namespace

void RegisterNnOps(OpRegistry* r) {
  {
    OpDef d;
    d.name = "Conv2D";  // x [N,H,W,C], kernel [kh,kw,C/group,F]
    d.num_inputs = 2;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      RETURN_IF_ERROR(RequireRank(n, in[1], 4, "kernel [kh,kw,in/group,out]"));
      const int64_t group = GetAttrI(n, "group", 1);
      const int64_t c = in[0].size() == 4 ? in[0][3] : -1;
      if (group < 1 || (c >= 0 && c % group != 0) || (in[1][3] >= 0 && in[1][3] % group != 0) ||
          !DimsAgree(c, in[1][2] < 0 ? -1 : in[1][2] * group)) {
        return ShapeError(n, absl::StrCat("input channels of ", ShapeString(in[0]), " do not match kernel ",
                                          ShapeString(in[1]), " in ", group, " groups"));
      }
      Shape o;
      RETURN_IF_ERROR(Window(n, in[0], in[1][0], in[1][1], in[1][3], &o));
      *out = {o};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      Attrs a = WindowAttrs(*c.node);
      return std::vector<std::string>{
          c.Add("Conv2DBackpropInput", "dx", {c.in(0), c.in(1), c.dy[0]}, a),
          c.Add("Conv2DBackpropFilter", "dk", {c.in(0), c.in(1), c.dy[0]}, a)};
    };
    r->Register(d);
    r->Register(ShapedLikeInput("Conv2DBackpropInput", 3, 0));
    r->Register(ShapedLikeInput("Conv2DBackpropFilter", 3, 1));
  }
  {
    OpDef d;
    d.name = "MaxPool";
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      Shape o;
      RETURN_IF_ERROR(Window(n, in[0], 0, 0, in[0].size() == 4 ? in[0][3] : -1, &o));
      *out = {o};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("MaxPoolGrad", "dx", {c.in(0), c.out(0), c.dy[0]}, WindowAttrs(*c.node))};
    };
    r->Register(d);
    r->Register(ShapedLikeInput("MaxPoolGrad", 3, 0));
  }
  {
    // The mean over each window (dense windows; count_include_pad: the
    // padding counts in the divisor, as PyTorch's default).
    OpDef d;
    d.name = "AvgPool";
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      Shape o;
      RETURN_IF_ERROR(Window(n, in[0], 0, 0, in[0].size() == 4 ? in[0][3] : -1, &o));
      std::vector<int64_t> dil = GetAttrInts(n, "dilations");
      if (!dil.empty() && dil != std::vector<int64_t>{1, 1}) return ShapeError(n, "dilated average pooling is not supported");
      *out = {o};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("AvgPoolGrad", "dx", {c.dy[0], c.in(0)}, WindowAttrs(*c.node))};
    };
    r->Register(d);
    r->Register(ShapedLikeInput("AvgPoolGrad", 2, 1));
  }
  {
    // Batch normalisation over every axis but the last (the channels: NHWC
    // or [N, C]). x, scale [C], offset [C], and optionally the moving mean
    // and variance [C] (docs/models.md, "Batch normalisation") -> y, and
    // the batch's mean, biased variance (for the gradient) and unbiased
    // variance (n / (n - 1) times the biased one, n the rows per channel:
    // what PyTorch folds into its running_var) [C]. A training step
    // normalises with the batch's statistics; evaluation (the kernel
    // context's training off) with the moving ones where they are given.
    // Outputs 1 and 3 are what a step reports for the moving variables;
    // nothing differentiates through them.
    OpDef d;
    d.name = "BatchNorm";
    d.num_inputs = -1;  // 3, or 5 with the moving statistics
    d.num_outputs = 4;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      if (in.size() != 3 && in.size() != 5) {
        return ShapeError(n, absl::StrCat(in.size(), " inputs; takes x, scale, offset and optionally moving mean and variance"));
      }
      if (in[0].size() < 2) return ShapeError(n, absl::StrCat("input ", ShapeString(in[0]), " has no channel axis"));
      const int64_t c = in[0].back();
      static const char* const kNames[] = {"x", "scale ", "offset ", "moving mean ", "moving variance "};
      for (size_t i = 1; i < in.size(); ++i) {
        if (in[i].size() != 1 || !DimsAgree(in[i][0], c)) {
          return ShapeError(n, absl::StrCat(kNames[i], ShapeString(in[i]), " is not [", c, "]"));
        }
      }
      if (!(GetAttrF(n, "epsilon", 1e-5f) > 0)) return ShapeError(n, "epsilon must be positive");
      *out = {in[0], {c}, {c}, {c}};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      if (!c.dy[1].empty() || !c.dy[2].empty() || !c.dy[3].empty()) {
        return absl::UnimplementedError(absl::StrCat("node ", c.node->name(), " (BatchNorm): gradients through the batch statistics outputs"));
      }
      const std::string g = c.Add("BatchNormGrad", "grad", {c.dy[0], c.in(0), c.in(1), c.out(1), c.out(2)},
                                  {{"epsilon", AttrF(GetAttrF(*c.node, "epsilon", 1e-5f))}});
      // The moving statistics (inputs 3, 4) only feed evaluation: no gradient.
      return std::vector<std::string>{TensorName(g, 0), TensorName(g, 1), TensorName(g, 2), "", ""};
    };
    r->Register(d);
    // (dy, x, scale, mean, var) -> dx, dscale, doffset.
    OpDef g;
    g.name = "BatchNormGrad";
    g.num_inputs = 5;
    g.num_outputs = 3;
    g.shape = [](const NodeDef&, const std::vector<Shape>& in, std::vector<Shape>* out) {
      *out = {in[1], in[2], in[2]};
      return absl::OkStatus();
    };
    r->Register(g);
  }
  {
    // rows [U, D] (the pulled rows of the unique ids, or a whole table),
    // index [...] into them, of any rank: y [..., D].
    OpDef d;
    d.name = "EmbeddingLookup";
    d.num_inputs = 2;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      RETURN_IF_ERROR(RequireRank(n, in[0], 2, "rows"));
      if (in[1].size() + 1 > static_cast<size_t>(kMaxRank)) return ShapeError(n, "index has too many dims");
      Shape y = in[1];
      y.push_back(in[0][1]);
      *out = {y};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("EmbeddingLookupGrad", "drows", {c.dy[0], c.in(1), c.in(0)}), ""};
    };
    r->Register(d);
    r->Register(ShapedLikeInput("EmbeddingLookupGrad", 3, 2));
  }
  {
    // rows [U, D], index [nnz] into rows, row_splits [B+1]: sum or mean per example.
    OpDef d;
    d.name = "EmbeddingBag";
    d.num_inputs = 3;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      RETURN_IF_ERROR(RequireRank(n, in[0], 2, "rows"));
      RETURN_IF_ERROR(RequireRank(n, in[1], 1, "index"));
      RETURN_IF_ERROR(RequireRank(n, in[2], 1, "row_splits"));
      std::string comb = GetAttrS(n, "combiner", "sum");
      if (comb != "sum" && comb != "mean") return ShapeError(n, "combiner must be sum or mean");
      *out = {{in[2][0] < 0 ? -1 : in[2][0] - 1, in[0][1]}};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{
          c.Add("EmbeddingBagGrad", "drows", {c.dy[0], c.in(1), c.in(2), c.in(0)},
                {{"combiner", AttrS(GetAttrS(*c.node, "combiner", "sum"))}}),
          "", ""};
    };
    r->Register(d);
    r->Register(ShapedLikeInput("EmbeddingBagGrad", 4, 3));
  }
  r->Register(Loss("SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad"));
  r->Register(Loss("SigmoidCrossEntropy", "SigmoidCrossEntropyGrad"));
  r->Register(Loss("MeanSquaredError", "MeanSquaredErrorGrad"));
  for (const char* m : {"Accuracy", "TopKAccuracy", "MeanAbsoluteError", "Precision", "Recall", "Auc"}) {
    r->Register(Metric(m));
  }
  for (const char* g : {"SoftmaxCrossEntropyGrad", "SigmoidCrossEntropyGrad", "MeanSquaredErrorGrad"}) {
    r->Register(ShapedLikeInput(g, 3, 1));
  }
}

}  // namespace psrt
