// Sources, arithmetic, activations, reshaping: shapes and gradients.
#include "common/graph/op_registry.h"
#include "common/graph/shape_util.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

using Grads = absl::StatusOr<std::vector<std::string>>;

OpDef Source(const std::string& name) {
  OpDef d;
  d.name = name;
  d.num_inputs = 0;
  d.shape = [](const NodeDef& n, const std::vector<Shape>&, std::vector<Shape>* out) {
    *out = {GetAttrShape(n, "shape")};
    return absl::OkStatus();
  };
  return d;
}

// y = f(x) with the gradient computed from (dy, y).
OpDef Unary(const std::string& name, const std::string& grad_op) {
  OpDef d;
  d.name = name;
  d.shape = [](const NodeDef&, const std::vector<Shape>& in, std::vector<Shape>* out) {
    *out = {in[0]};
    return absl::OkStatus();
  };
  d.grad = [grad_op](const GradContext& c) -> Grads {
    if (grad_op.empty()) return std::vector<std::string>{c.dy[0]};
    return std::vector<std::string>{c.Add(grad_op, grad_op, {c.dy[0], c.out(0)})};
  };
  return d;
}


}  // namespace

void RegisterBasicOps(OpRegistry* r) {
  r->Register(Source("Placeholder"));
  r->Register(Source("Variable"));
  {
    OpDef d;
    d.name = "Const";
    d.num_inputs = 0;
    d.shape = [](const NodeDef& n, const std::vector<Shape>&, std::vector<Shape>* out) {
      auto it = n.attr().find("value");
      if (it == n.attr().end() || !it->second.has_tensor()) return ShapeError(n, "no value attr");
      const auto& dims = it->second.tensor().shape().dim();
      *out = {Shape(dims.begin(), dims.end())};
      return absl::OkStatus();
    };
    r->Register(d);
  }
  r->Register(Unary("Identity", ""));
  r->Register(Unary("Relu", "ReluGrad"));
  r->Register(Unary("Sigmoid", "SigmoidGrad"));
  r->Register(Unary("Tanh", "TanhGrad"));
  r->Register(Unary("Softmax", "SoftmaxGrad"));
  r->Register(Unary("LogSoftmax", "LogSoftmaxGrad"));  // over the last axis
  for (const char* g : {"ReluGrad", "SigmoidGrad", "TanhGrad", "SoftmaxGrad", "LogSoftmaxGrad"}) {
    r->Register(ShapedLikeInput(g, 2, 0));
  }
  {
    // y = x with its axes permuted: y's axis i is x's axis perm[i].
    OpDef d;
    d.name = "Transpose";
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      std::vector<int64_t> perm = GetAttrInts(n, "perm");
      if (perm.size() != in[0].size()) {
        return ShapeError(n, absl::StrCat("perm has ", perm.size(), " axes, the input is ", ShapeString(in[0])));
      }
      std::vector<bool> seen(perm.size(), false);
      Shape s(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) {
        if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(perm.size()) || seen[perm[i]]) {
          return ShapeError(n, "perm is not a permutation of the input's axes");
        }
        seen[perm[i]] = true;
        s[i] = in[0][perm[i]];
      }
      *out = {s};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      std::vector<int64_t> perm = GetAttrInts(*c.node, "perm"), inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
      return std::vector<std::string>{c.Add("Transpose", "dx", {c.dy[0]}, {{"perm", AttrInts(inverse)}})};
    };
    r->Register(d);
  }

  {
    OpDef d;
    d.name = "MatMul";
    d.num_inputs = 2;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      RETURN_IF_ERROR(RequireRank(n, in[0], 2, "input a"));
      RETURN_IF_ERROR(RequireRank(n, in[1], 2, "input b"));
      bool ta = GetAttrB(n, "transpose_a"), tb = GetAttrB(n, "transpose_b");
      int64_t m = in[0][ta ? 1 : 0], k1 = in[0][ta ? 0 : 1];
      int64_t k2 = in[1][tb ? 1 : 0], nn = in[1][tb ? 0 : 1];
      if (!DimsAgree(k1, k2)) {
        return ShapeError(n, absl::StrCat("inner dimensions differ: ", ShapeString(in[0]), " x ",
                                          ShapeString(in[1])));
      }
      *out = {{m, nn}};
      return absl::OkStatus();
    };
    // y = op(a) op(b), op a transpose where the attr says so (ONNX's Gemm
    // with transB, PyTorch's Linear layout [out, in]).
    d.grad = [](const GradContext& c) -> Grads { return ProductGrads(c, "MatMul", "transpose_a", "transpose_b"); };
    r->Register(d);
  }
  {
    OpDef d;
    d.name = "BiasAdd";
    d.num_inputs = 2;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      RETURN_IF_ERROR(RequireRank(n, in[1], 1, "bias"));
      if (in[0].empty() || !DimsAgree(in[0].back(), in[1][0])) {
        return ShapeError(n, absl::StrCat("bias ", ShapeString(in[1]), " does not match the last dim of ",
                                          ShapeString(in[0])));
      }
      *out = {in[0]};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.dy[0], c.Add("BiasAddGrad", "db", {c.dy[0]})};
    };
    r->Register(d);
    OpDef g;
    g.name = "BiasAddGrad";
    g.shape = [](const NodeDef&, const std::vector<Shape>& in, std::vector<Shape>* out) {
      *out = {{in[0].empty() ? 1 : in[0].back()}};
      return absl::OkStatus();
    };
    r->Register(g);
  }
  {
    OpDef d;
    d.name = "Mul";
    d.num_inputs = 2;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      if (!ShapesAgree(in[0], in[1])) {
        return ShapeError(n, absl::StrCat("shapes differ: ", ShapeString(in[0]), " and ", ShapeString(in[1])));
      }
      *out = {in[0]};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("Mul", "da", {c.dy[0], c.in(1)}),
                                      c.Add("Mul", "db", {c.dy[0], c.in(0)})};
    };
    r->Register(d);
  }
  {
    OpDef d;
    d.name = "AddN";
    d.num_inputs = -1;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      if (in.empty()) return ShapeError(n, "needs at least one input");
      for (const Shape& s : in) {
        if (!ShapesAgree(s, in[0])) return ShapeError(n, absl::StrCat("shapes differ: ", ShapeString(s), " and ", ShapeString(in[0])));
      }
      *out = {in[0]};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>(c.node->input_size(), c.dy[0]);
    };
    r->Register(d);
  }
  {
    OpDef d;
    d.name = "Reshape";
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      Shape target = GetAttrInts(n, "shape");
      int unknown = 0;
      int64_t known = 1;
      for (int64_t t : target) {
        if (t < 0) {
          ++unknown;
        } else {
          known *= t;
        }
      }
      if (unknown > 1) return ShapeError(n, "at most one -1 in the target shape");
      int64_t total = 1;
      for (int64_t d : in[0]) total = (d < 0 || total < 0) ? -1 : total * d;
      if (total >= 0 && unknown == 0 && total != known) {
        return ShapeError(n, absl::StrCat("cannot reshape ", ShapeString(in[0]), " to ", ShapeString(target)));
      }
      *out = {target};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("ReshapeLike", "dx", {c.dy[0], c.in(0)})};
    };
    r->Register(d);
    r->Register(ShapedLikeInput("ReshapeLike", 2, 1));
  }
  {
    OpDef d;
    d.name = "ConcatV2";
    d.num_inputs = -1;
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      if (in.empty()) return ShapeError(n, "needs at least one input");
      Shape s = in[0];
      int64_t axis = GetAttrI(n, "axis", -1);
      if (axis < 0) axis += static_cast<int64_t>(s.size());
      if (axis < 0 || axis >= static_cast<int64_t>(s.size())) return ShapeError(n, "axis out of range");
      for (size_t i = 1; i < in.size(); ++i) {
        if (in[i].size() != s.size()) return ShapeError(n, "inputs differ in rank");
        for (size_t k = 0; k < s.size(); ++k) {
          if (static_cast<int64_t>(k) == axis) {
            s[k] = (s[k] < 0 || in[i][k] < 0) ? -1 : s[k] + in[i][k];
          } else if (!DimsAgree(s[k], in[i][k])) {
            return ShapeError(n, absl::StrCat("input ", i, " is ", ShapeString(in[i]), ", input 0 is ", ShapeString(in[0])));
          }
        }
      }
      *out = {s};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      std::vector<std::string> grads;
      std::vector<std::string> inputs = {c.dy[0]};
      for (int i = 0; i < c.node->input_size(); ++i) inputs.push_back(c.in(i));
      for (int i = 0; i < c.node->input_size(); ++i) {
        grads.push_back(c.Add("ConcatGrad", "d" + std::to_string(i), inputs,
                              {{"index", AttrI(i)}, {"axis", AttrI(GetAttrI(*c.node, "axis", -1))}}));
      }
      return grads;
    };
    r->Register(d);
    OpDef g;
    g.name = "ConcatGrad";
    g.num_inputs = -1;
    g.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      *out = {in[1 + GetAttrI(n, "index")]};
      return absl::OkStatus();
    };
    r->Register(g);
  }
  {
    OpDef d;
    d.name = "Dropout";
    d.num_outputs = 2;  // y and the mask it used (scaled by 1/(1-rate))
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      float rate = GetAttrF(n, "rate");
      if (rate < 0 || rate >= 1) return ShapeError(n, "rate must be in [0, 1)");
      *out = {in[0], in[0]};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      return std::vector<std::string>{c.Add("Mul", "dx", {c.dy[0], c.out(1)})};
    };
    r->Register(d);
  }
}

}  // namespace psrt
