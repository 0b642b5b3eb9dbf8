// The ops sequence models (transformers) add: batched matrix products,
// layer normalisation, slices, broadcasting to a shape, and the unary maths
// of GELU and hand-written normalisations (Erf, Sqrt, Pow): shapes and
// gradients.
#include <cmath>

#include "common/graph/op_registry.h"
#include "common/graph/shape_util.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

using Grads = absl::StatusOr<std::vector<std::string>>;

// y = f(x) where the gradient op reads (dy, x) or (dy, y).
OpDef Elementwise(const std::string& name, const std::string& grad_op, bool grad_reads_output,
                  const std::vector<std::string>& attrs = {}) {
  OpDef d;
  d.name = name;
  d.shape = [](const NodeDef&, const std::vector<Shape>& in, std::vector<Shape>* out) {
    *out = {in[0]};
    return absl::OkStatus();
  };
  d.grad = [grad_op, grad_reads_output, attrs](const GradContext& c) -> Grads {
    Attrs a;
    for (const std::string& k : attrs) {
      auto it = c.node->attr().find(k);
      if (it != c.node->attr().end()) a[k] = it->second;
    }
    return std::vector<std::string>{c.Add(grad_op, "dx", {c.dy[0], grad_reads_output ? c.out(0) : c.in(0)}, a)};
  };
  return d;
}

// begin/size attrs of a Slice against an input shape: one per axis, the
// slice inside every known dim.
absl::Status SliceShape(const NodeDef& n, const Shape& x, Shape* out) {
  const std::vector<int64_t> begin = GetAttrInts(n, "begin"), size = GetAttrInts(n, "size");
  if (begin.size() != x.size() || size.size() != x.size()) {
    return ShapeError(n, absl::StrCat("begin and size need ", x.size(), " values each for input ", ShapeString(x)));
  }
  out->assign(x.size(), -1);
  for (size_t i = 0; i < x.size(); ++i) {
    if (begin[i] < 0 || size[i] < -1) return ShapeError(n, absl::StrCat("bad begin ", begin[i], " or size ", size[i]));
    if (x[i] >= 0 && (begin[i] > x[i] || (size[i] >= 0 && begin[i] + size[i] > x[i]))) {
      return ShapeError(n, absl::StrCat("slice [", begin[i], ", +", size[i], ") of axis ", i, " leaves ", ShapeString(x)));
    }
    (*out)[i] = size[i] >= 0 ? size[i] : (x[i] >= 0 ? x[i] - begin[i] : -1);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterSequenceOps(OpRegistry* r) {
  {
    // a [..., M, K] x b [..., K, N] with the same leading (batch) dims;
    // adj_x / adj_y transpose the last two axes of a / b first.
    OpDef d;
    d.name = "BatchMatMul";
    d.num_inputs = 2;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      const Shape &a = in[0], &b = in[1];
      if (a.size() < 3 || b.size() != a.size()) {
        return ShapeError(n, absl::StrCat("needs two inputs of the same rank >= 3, got ", ShapeString(a), " and ", ShapeString(b)));
      }
      const size_t r = a.size();
      for (size_t i = 0; i + 2 < r; ++i) {
        if (!DimsAgree(a[i], b[i])) return ShapeError(n, absl::StrCat("batch dims differ: ", ShapeString(a), " and ", ShapeString(b)));
      }
      const bool ax = GetAttrB(n, "adj_x"), ay = GetAttrB(n, "adj_y");
      const int64_t m = a[ax ? r - 1 : r - 2], k = a[ax ? r - 2 : r - 1];
      const int64_t k2 = b[ay ? r - 1 : r - 2], cols = b[ay ? r - 2 : r - 1];
      if (!DimsAgree(k, k2)) return ShapeError(n, absl::StrCat("inner dimensions differ: ", ShapeString(a), " x ", ShapeString(b)));
      Shape s(a.begin(), a.end() - 2);
      for (size_t i = 0; i + 2 < r; ++i) s[i] = a[i] >= 0 ? a[i] : b[i];
      s.push_back(m);
      s.push_back(cols);
      *out = {s};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads { return ProductGrads(c, "BatchMatMul", "adj_x", "adj_y"); };
    r->Register(d);
  }
  {
    // (x, gamma, beta): x normalised over its last axis, then scaled and
    // shifted (ONNX's LayerNormalization with axis -1).
    OpDef d;
    d.name = "LayerNorm";
    d.num_inputs = 3;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      if (in[0].empty()) return ShapeError(n, "input has no axis to normalise");
      const int64_t dim = in[0].back();
      for (int i = 1; i <= 2; ++i) {
        if (in[i].size() != 1 || !DimsAgree(in[i][0], dim)) {
          return ShapeError(n, absl::StrCat(i == 1 ? "gamma " : "beta ", ShapeString(in[i]), " is not [", dim, "]"));
        }
      }
      const float eps = GetAttrF(n, "epsilon", 1e-5f);
      if (!(eps > 0 && eps < 1)) return ShapeError(n, "epsilon must be in (0, 1)");
      *out = {in[0]};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      const std::string g = c.Add("LayerNormGrad", "grad", {c.dy[0], c.in(0), c.in(1)},
                                  {{"epsilon", AttrF(GetAttrF(*c.node, "epsilon", 1e-5f))}});
      return std::vector<std::string>{TensorName(g, 0), TensorName(g, 1), TensorName(g, 2)};
    };
    r->Register(d);
    // (dy, x, gamma) -> dx, dgamma, dbeta.
    OpDef g;
    g.name = "LayerNormGrad";
    g.num_inputs = 3;
    g.num_outputs = 3;
    g.shape = [](const NodeDef&, const std::vector<Shape>& in, std::vector<Shape>* out) {
      *out = {in[1], in[2], in[2]};
      return absl::OkStatus();
    };
    r->Register(g);
  }
  {
    // x[begin[i] : begin[i] + size[i]] on every axis (size -1: to the end).
    OpDef d;
    d.name = "Slice";
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      Shape s;
      RETURN_IF_ERROR(SliceShape(n, in[0], &s));
      *out = {s};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("SliceGrad", "dx", {c.dy[0], c.in(0)},
                                            {{"begin", AttrInts(GetAttrInts(*c.node, "begin"))},
                                             {"size", AttrInts(GetAttrInts(*c.node, "size"))}})};
    };
    r->Register(d);
    // (dy, x): zeros shaped like x with dy at begin.
    r->Register(ShapedLikeInput("SliceGrad", 2, 1));
  }
  {
    // (x, ref): x broadcast (NumPy rules) to the shape attr, where a dim
    // d < 0 stands for -d times ref's first dim (the batch: what ONNX's
    // Expand to a shape computed from the input's Shape becomes).
    OpDef d;
    d.name = "BroadcastTo";
    d.num_inputs = 2;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      Shape target = GetAttrInts(n, "shape");
      if (in[0].size() > target.size()) {
        return ShapeError(n, absl::StrCat("input ", ShapeString(in[0]), " has more axes than ", ShapeString(target)));
      }
      const size_t lead = target.size() - in[0].size();
      for (size_t i = 0; i < target.size(); ++i) {
        if (target[i] < 0) target[i] = (in[1].empty() || in[1][0] < 0) ? -1 : -target[i] * in[1][0];
        const int64_t x = i < lead ? 1 : in[0][i - lead];
        if (x != 1 && !DimsAgree(x, target[i])) {
          return ShapeError(n, absl::StrCat("input ", ShapeString(in[0]), " does not broadcast to ", ShapeString(target)));
        }
      }
      *out = {target};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("SumLike", "dx", {c.dy[0], c.in(0)}), ""};
    };
    r->Register(d);
  }
  r->Register(Elementwise("Erf", "ErfGrad", false));
  r->Register(ShapedLikeInput("ErfGrad", 2, 1));
  // x * Phi(x), Phi the standard normal's CDF (the exact GELU).
  r->Register(Elementwise("Gelu", "GeluGrad", false));
  r->Register(ShapedLikeInput("GeluGrad", 2, 1));
  r->Register(Elementwise("Sqrt", "SqrtGrad", true));
  r->Register(ShapedLikeInput("SqrtGrad", 2, 1));
  r->Register(Elementwise("Pow", "PowGrad", false, {"exponent"}));  // attr exponent
  r->Register(ShapedLikeInput("PowGrad", 2, 1));
}

}  // namespace psrt
