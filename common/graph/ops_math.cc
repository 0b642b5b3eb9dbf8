// Broadcasting arithmetic (NumPy rules, as ONNX's Add/Sub/Mul/Div), the
// reductions, and Clip: shapes and gradients.
//
// A broadcast input's gradient is the output's gradient summed over the
// axes that input was repeated along: SumLike(dy, input) does that at run
// time, so one graph serves any batch size (the batch dim is unknown here).
#include "common/graph/op_registry.h"
#include "common/graph/shape_util.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

using Grads = absl::StatusOr<std::vector<std::string>>;

// NumPy broadcasting of two shapes whose dims may be unknown (-1): an
// unknown dim against 1 stays unknown, against n > 1 is n.
absl::Status BroadcastShapes(const NodeDef& n, const Shape& a, const Shape& b, Shape* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == 1) {
      (*out)[i] = db;
    } else if (db == 1) {
      (*out)[i] = da;
    } else if (da < 0 || db < 0) {
      (*out)[i] = std::max(da, db);
    } else if (da == db) {
      (*out)[i] = da;
    } else {
      return ShapeError(n, absl::StrCat("shapes ", ShapeString(a), " and ", ShapeString(b), " do not broadcast"));
    }
  }
  return absl::OkStatus();
}

OpDef Binary(const std::string& name,
             std::function<std::vector<std::string>(const GradContext&)> grad) {
  OpDef d;
  d.name = name;
  d.num_inputs = 2;
  d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
    Shape s;
    RETURN_IF_ERROR(BroadcastShapes(n, in[0], in[1], &s));
    *out = {s};
    return absl::OkStatus();
  };
  d.grad = [grad](const GradContext& c) -> Grads { return grad(c); };
  return d;
}

// Sums g back to the shape of forward input i (scale -1: negated).
std::string Unbroadcast(const GradContext& c, const std::string& suffix, const std::string& g, int i,
                        float scale = 1.0f) {
  Attrs a;
  if (scale != 1.0f) a["scale"] = AttrF(scale);
  return c.Add("SumLike", suffix, {g, c.in(i)}, a);
}

// The axes attr of a reduction, each in [0, rank) and once; empty = all.
absl::StatusOr<std::vector<bool>> ReducedAxes(const NodeDef& n, size_t rank) {
  std::vector<int64_t> axes = GetAttrInts(n, "axes");
  std::vector<bool> r(rank, axes.empty());
  for (int64_t a : axes) {
    const int64_t k = a < 0 ? a + static_cast<int64_t>(rank) : a;
    if (k < 0 || k >= static_cast<int64_t>(rank) || r[k]) {
      return ShapeError(n, absl::StrCat("axis ", a, " is out of range or repeated for rank ", rank));
    }
    r[k] = true;
  }
  return r;
}

OpDef Reduction(const std::string& name, bool mean) {
  OpDef d;
  d.name = name;  // attrs: axes (empty: all), keep_dims
  d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
    ASSIGN_OR_RETURN(std::vector<bool> r, ReducedAxes(n, in[0].size()));
    const bool keep = GetAttrB(n, "keep_dims");
    Shape s;
    for (size_t i = 0; i < in[0].size(); ++i) {
      if (!r[i]) {
        s.push_back(in[0][i]);
      } else if (keep) {
        s.push_back(1);
      }
    }
    *out = {s};
    return absl::OkStatus();
  };
  d.grad = [mean](const GradContext& c) -> Grads {
    Attrs a;
    if (!GetAttrB(*c.node, "keep_dims")) a["axes"] = AttrInts(GetAttrInts(*c.node, "axes"));
    if (mean) a["mean"] = AttrB(true);
    return std::vector<std::string>{c.Add("BroadcastLike", "dx", {c.dy[0], c.in(0)}, a)};
  };
  return d;
}

}  // namespace

void RegisterMathOps(OpRegistry* r) {
  r->Register(Binary("BroadcastAdd", [](const GradContext& c) {
    return std::vector<std::string>{Unbroadcast(c, "da", c.dy[0], 0), Unbroadcast(c, "db", c.dy[0], 1)};
  }));
  r->Register(Binary("BroadcastSub", [](const GradContext& c) {
    return std::vector<std::string>{Unbroadcast(c, "da", c.dy[0], 0), Unbroadcast(c, "db", c.dy[0], 1, -1.0f)};
  }));
  r->Register(Binary("BroadcastMul", [](const GradContext& c) {
    return std::vector<std::string>{
        Unbroadcast(c, "da", c.Add("BroadcastMul", "dy_b", {c.dy[0], c.in(1)}), 0),
        Unbroadcast(c, "db", c.Add("BroadcastMul", "dy_a", {c.dy[0], c.in(0)}), 1)};
  }));
  // y = a / b: da = dy / b, db = -dy * y / b.
  r->Register(Binary("BroadcastDiv", [](const GradContext& c) {
    std::string dy_y = c.Add("BroadcastMul", "dy_y", {c.dy[0], c.out(0)});
    return std::vector<std::string>{
        Unbroadcast(c, "da", c.Add("BroadcastDiv", "dy_over_b", {c.dy[0], c.in(1)}), 0),
        Unbroadcast(c, "db", c.Add("BroadcastDiv", "dy_y_over_b", {dy_y, c.in(1)}), 1, -1.0f)};
  }));
  // (dy, like): dy summed to like's shape (attr scale multiplies).
  r->Register(ShapedLikeInput("SumLike", 2, 1));
  // (dy, like): dy (lacking the axes attr's axes unless of like's rank)
  // repeated to like's shape; mean: divided by the repeat count.
  r->Register(ShapedLikeInput("BroadcastLike", 2, 1));
  r->Register(Reduction("ReduceSum", false));
  r->Register(Reduction("ReduceMean", true));
  {
    OpDef d;
    d.name = "Clip";  // attrs min, max (absent: unbounded)
    d.shape = [](const NodeDef& n, const std::vector<Shape>& in, std::vector<Shape>* out) {
      auto lo = n.attr().find("min"), hi = n.attr().find("max");
      if (lo != n.attr().end() && hi != n.attr().end() && !(lo->second.f() <= hi->second.f())) {
        return ShapeError(n, "min is above max");
      }
      *out = {in[0]};
      return absl::OkStatus();
    };
    d.grad = [](const GradContext& c) -> Grads {
      Attrs a;
      for (const char* k : {"min", "max"}) {
        auto it = c.node->attr().find(k);
        if (it != c.node->attr().end()) a[k] = it->second;
      }
      return std::vector<std::string>{c.Add("ClipGrad", "dx", {c.dy[0], c.in(0)}, a)};
    };
    r->Register(d);
    r->Register(ShapedLikeInput("ClipGrad", 2, 1));
  }
}

}  // namespace psrt
