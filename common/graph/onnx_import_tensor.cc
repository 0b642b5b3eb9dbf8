// The ONNX importer, part two: values known at import time and the shape
// arithmetic exporters write (Shape, Gather, Concat, Slice, ... on shape
// vectors, with the batch size as a symbol), reshaping ops (Reshape,
// Transpose, Squeeze, Unsqueeze, Concat, Gather, Slice, Expand) and the
// sequence-model ops (batched MatMul, LayerNormalization, Softmax on any
// axis, Erf, Sqrt, Pow, Gelu).
//
// Why fold: PyTorch's exporter writes `x.view(B, T, H, d)` as
// Shape(x) -> Gather -> Concat(B, T, H, d) -> Reshape. psrt's graph has
// static shapes with one unknown dim per tensor, so the importer evaluates
// that arithmetic itself, carrying "k times the batch" where the batch
// size enters, and emits one Reshape whose -1 is that dim.
#include <cmath>
#include <numeric>

#include "absl/strings/str_join.h"
#include "common/graph/onnx_importer.h"
#include "common/graph/shape_util.h"
#include "common/status_macros.h"

namespace psrt {
namespace onnx_internal {
namespace {

// Folded values are small (shape vectors, scalars); this bounds what a
// hostile ConstantOfShape or Expand of constants can make us allocate.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 22;

// A folded value as numbers: int64 values are exact in a double up to
// 2^53, far past any dim kMaxElements allows (INT64_MIN / MAX, Slice's
// "from the start / to the end", are kept as such).
struct Arr {
  bool is_float = false;
  Shape dims;
  std::vector<double> v;
  std::vector<int64_t> k;  // batch multiples, one per element (0: constant)
  bool symbolic() const {
    return std::any_of(k.begin(), k.end(), [](int64_t x) { return x != 0; });
  }
};

Arr ToArr(const Folded& f) {
  Arr a;
  a.is_float = f.value.dtype() == DT_FLOAT;
  a.dims = f.value.shape().dims();
  const int64_t n = f.value.NumElements();
  a.v.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    a.v[i] = a.is_float ? f.value.data<float>()[i] : static_cast<double>(f.value.data<int64_t>()[i]);
  }
  a.k = f.batch.empty() ? std::vector<int64_t>(n, 0) : f.batch;
  return a;
}

Folded FromArr(const Arr& a) {
  Folded f;
  if (a.is_float) {
    std::vector<float> v(a.v.begin(), a.v.end());
    f.value = Tensor::FromVector<float>(v, TensorShape(a.dims));
  } else {
    std::vector<int64_t> v(a.v.size());
    // Slice's "to the end" is INT64_MAX, which a double rounds up past it.
    constexpr double kTop = 9.2233720368547758e18;
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = a.v[i] >= kTop ? INT64_MAX : a.v[i] <= -kTop ? INT64_MIN : static_cast<int64_t>(a.v[i]);
    }
    f.value = Tensor::FromVector<int64_t>(v, TensorShape(a.dims));
  }
  if (a.symbolic()) f.batch = a.k;
  return f;
}

// Squeeze's output dims (axes listed, or every 1 where none are), or
// Unsqueeze's (a 1 inserted at each of the output's axes); "" or why not.
std::string Squeezed(const Shape& in, const std::vector<int64_t>& axes, bool unsqueeze, Shape* out) {
  if (unsqueeze) {
    *out = in;
    for (int64_t a : axes) out->insert(out->begin() + a, 1);
    return "";
  }
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    const bool listed = std::count(axes.begin(), axes.end(), static_cast<int64_t>(i)) > 0;
    if (listed && in[i] != 1) return absl::StrCat("axis ", i, " of ", ShapeString(in), " is not 1");
    if (!listed && !(axes.empty() && in[i] == 1)) out->push_back(in[i]);
  }
  return "";
}

// Normalises axis against rank; false when out of range.
bool NormAxis(int64_t* axis, int64_t rank) {
  if (*axis < 0) *axis += rank;
  return *axis >= 0 && *axis < rank;
}

// out[i_0, ..., i_r-1] = x[j] where x's index along axis perm[a] is
// pick[a][i_a] (perm empty: the identity): a slice with perm empty, a
// transpose with every index picked. The result has pick[a].size() dims.
Arr Gathered(const Arr& x, const std::vector<std::vector<int64_t>>& pick, std::vector<int64_t> perm) {
  const size_t rank = x.dims.size();
  if (perm.empty()) {
    perm.resize(rank);
    std::iota(perm.begin(), perm.end(), 0);
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t a = rank; a-- > 1;) stride[a - 1] = stride[a] * x.dims[a];
  Arr out;
  out.is_float = x.is_float;
  int64_t total = 1;
  for (const auto& p : pick) {
    out.dims.push_back(static_cast<int64_t>(p.size()));
    total *= static_cast<int64_t>(p.size());
  }
  std::vector<size_t> i(rank, 0);
  for (int64_t e = 0; e < total; ++e) {
    int64_t j = 0;
    for (size_t a = 0; a < rank; ++a) j += pick[a][i[a]] * stride[perm[a]];
    out.v.push_back(x.v[j]);
    out.k.push_back(x.k[j]);
    for (size_t a = rank; a-- > 0;) {  // the next index, last axis fastest
      if (++i[a] < pick[a].size()) break;
      i[a] = 0;
    }
  }
  return out;
}

}  // namespace

std::optional<Folded> Importer::Known(const Node& n, int i) const {
  if (!HasInput(n, i)) return std::nullopt;
  const std::string& name = n.input(i);
  // A known value stays known after an op read it as data (a Const node).
  auto c = constants_.find(name);
  if (c != constants_.end()) return c->second;
  if (values_.count(name)) return std::nullopt;
  auto it = initializers_.find(name);
  // A float initializer is a parameter (trained), never folded away.
  if (it == initializers_.end() || it->second->data_type() == onnx::TensorProto::FLOAT) return std::nullopt;
  absl::StatusOr<Tensor> t = OnnxTensor(*it->second, name);
  // In() reports the file's error; a large one is data, not shape arithmetic.
  if (!t.ok() || t->NumElements() > kMaxFoldedElements) return std::nullopt;
  return Folded{*t, {}};
}

absl::StatusOr<std::vector<int64_t>> Importer::AxesOf(const Node& n, int64_t rank, bool required) {
  std::vector<int64_t> axes;
  if (Attr(n, "axes") != nullptr) {
    ASSIGN_OR_RETURN(axes, Ints(n, "axes", {}));
  } else if (HasInput(n, 1)) {
    std::optional<Folded> a = Known(n, 1);
    if (!a || a->symbolic() || a->value.dtype() != DT_INT64 || a->value.shape().rank() > 1 ||
        a->value.NumElements() > kMaxRank) {
      return Unsupported(n, "axes must be a constant int64 vector");
    }
    axes.assign(a->value.data<int64_t>(), a->value.data<int64_t>() + a->value.NumElements());
  } else if (required) {
    return Bad(n, "needs axes");
  }
  std::vector<bool> seen(std::max<int64_t>(rank, 0), false);
  for (int64_t& a : axes) {
    if (!NormAxis(&a, rank) || seen[a]) return Bad(n, absl::StrCat("axis out of range or repeated for rank ", rank));
    seen[a] = true;
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

absl::StatusOr<bool> Importer::Fold(const Node& n) {
  static const std::set<std::string> kFoldable = {"Identity", "Cast",  "CastLike", "Squeeze", "Unsqueeze",
                                                  "Reshape",  "Concat", "Gather",  "Slice",   "Mul",
                                                  "Div",      "Add",   "Sub",      "Sqrt",    "ConstantOfShape",
                                                  "Transpose"};
  if (!kFoldable.count(n.op_type()) || n.input_size() == 0) return false;
  // Inputs each op takes (a file may give any number).
  static const std::map<std::string, std::pair<int, int>> kArity = {
      {"Identity", {1, 1}}, {"Cast", {1, 1}},   {"Sqrt", {1, 1}},   {"ConstantOfShape", {1, 1}},
      {"CastLike", {2, 2}}, {"Reshape", {2, 2}}, {"Gather", {2, 2}}, {"Mul", {2, 2}},
      {"Div", {2, 2}},      {"Add", {2, 2}},     {"Sub", {2, 2}},    {"Squeeze", {1, 2}},
      {"Unsqueeze", {1, 2}}, {"Slice", {1, 5}},  {"Concat", {1, kMaxRank * 1024}}};
  if (auto a = kArity.find(n.op_type());
      a != kArity.end() && (n.input_size() < a->second.first || n.input_size() > a->second.second)) {
    return Bad(n, absl::StrCat("has ", n.input_size(), " inputs (", a->second.first, " to ", a->second.second, " expected)"));
  }
  std::vector<Folded> in;
  for (int i = 0; i < n.input_size(); ++i) {
    if (n.input(i).empty()) {
      if (i == 0) return false;  // no data: the converter says what is missing
      in.push_back(Folded{Tensor::FromVector<int64_t>({}, TensorShape({0})), {}});  // an omitted optional input
      continue;
    }
    std::optional<Folded> f = Known(n, i);
    if (!f && n.op_type() == "CastLike" && i == 1 && values_.count(n.input(1))) {
      f = Folded{Tensor::Scalar<float>(0.0f), {}};  // like a graph value: every one is float
    }
    if (!f) return false;
    in.push_back(std::move(*f));
  }
  if (n.op_type() == "ConstantOfShape" && in[0].symbolic()) return false;  // a graph op (ConstantOfShapeNode)
  ASSIGN_OR_RETURN(Folded out, FoldOp(n, in));
  if (out.value.NumElements() > kMaxFoldedElements) {
    return Unsupported(n, absl::StrCat("a constant of ", out.value.NumElements(), " elements is too large to fold"));
  }
  constants_[n.output(0)] = std::move(out);
  return true;
}

absl::StatusOr<Folded> Importer::FoldOp(const Node& n, const std::vector<Folded>& in) {
  const std::string& op = n.op_type();
  Arr x = ToArr(in[0]);
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  auto ints_of = [&](int i, const char* what) -> absl::StatusOr<std::vector<int64_t>> {
    if (static_cast<size_t>(i) >= in.size() || in[i].value.dtype() != DT_INT64 || in[i].symbolic() ||
        in[i].value.shape().rank() > 1 || in[i].value.NumElements() > kMaxRank) {
      return Unsupported(n, absl::StrCat(what, " must be a constant int64 vector"));
    }
    return std::vector<int64_t>(in[i].value.data<int64_t>(), in[i].value.data<int64_t>() + in[i].value.NumElements());
  };
  if (op == "Identity") return in[0];
  if (op == "Cast" || op == "CastLike") {
    bool to_float;
    if (op == "Cast") {
      ASSIGN_OR_RETURN(int64_t to, Int(n, "to", 0));
      if (to != onnx::TensorProto::FLOAT && to != onnx::TensorProto::DOUBLE && to != onnx::TensorProto::INT64 &&
          to != onnx::TensorProto::INT32) {
        return Unsupported(n, absl::StrCat("cast to data type ", to, " (FLOAT, DOUBLE, INT32 and INT64 are supported)"));
      }
      to_float = to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE;
    } else {
      to_float = in.size() > 1 && in[1].value.dtype() == DT_FLOAT;
    }
    if (to_float && x.symbolic()) return Unsupported(n, "the batch size as a float");
    if (!to_float) {
      for (double& v : x.v) v = std::trunc(v);
    }
    x.is_float = to_float;
    return FromArr(x);
  }
  if (op == "Squeeze" || op == "Unsqueeze") {
    const bool un = op == "Unsqueeze";
    const auto* attr = Attr(n, "axes");
    const int64_t added = attr != nullptr ? attr->ints_size() : (in.size() > 1 ? in[1].value.NumElements() : 0);
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(n, un ? rank + added : rank, un));
    Shape dims;
    if (std::string why = Squeezed(x.dims, axes, un, &dims); !why.empty()) return Bad(n, why);
    x.dims = dims;
    return FromArr(x);
  }
  if (op == "Reshape") {
    ASSIGN_OR_RETURN(std::vector<int64_t> target, ints_of(1, "shape"));
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] == 0) target[i] = i < x.dims.size() ? x.dims[i] : 0;
      if (target[i] == -1) {
        if (infer >= 0) return Bad(n, "more than one -1 in the shape");
        infer = static_cast<int64_t>(i);
      } else if (target[i] < 0 || target[i] > kMaxElements) {
        return Bad(n, "bad dim in the shape");
      } else {
        known *= target[i];
        if (known > kMaxElements) return Bad(n, "the shape has too many elements");
      }
    }
    const int64_t total = static_cast<int64_t>(x.v.size());
    if (infer >= 0) target[infer] = known == 0 ? 0 : total / known;
    if (Product(target) != total) return Bad(n, absl::StrCat("cannot reshape ", ShapeString(x.dims), " to ", ShapeString(target)));
    x.dims = target;
    return FromArr(x);
  }
  if (op == "Concat") {
    ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", 0));
    for (const Folded& f : in) {
      if (f.value.shape().rank() != 1) return Unsupported(n, "concatenation of known values of rank other than 1");
      if ((f.value.dtype() == DT_FLOAT) != x.is_float) return Bad(n, "inputs differ in data type");
    }
    if (axis != 0 && axis != -1) return Bad(n, absl::StrCat("axis ", axis, " for 1-D inputs"));
    Arr out;
    out.is_float = x.is_float;
    for (const Folded& f : in) {
      Arr a = ToArr(f);
      out.v.insert(out.v.end(), a.v.begin(), a.v.end());
      out.k.insert(out.k.end(), a.k.begin(), a.k.end());
    }
    out.dims = {static_cast<int64_t>(out.v.size())};
    return FromArr(out);
  }
  if (op == "Gather") {
    ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", 0));
    if (rank != 1 || (axis != 0 && axis != -1)) return Unsupported(n, "gathering from a known value of rank other than 1");
    if (in[1].value.dtype() != DT_INT64 || in[1].symbolic() || in[1].value.shape().rank() > 1 ||
        in[1].value.NumElements() > kMaxFoldedElements) {
      return Bad(n, "indices must be a constant int64 scalar or vector");
    }
    Arr out;
    out.is_float = x.is_float;
    out.dims = in[1].value.shape().dims();
    for (int64_t i = 0; i < in[1].value.NumElements(); ++i) {
      int64_t idx = in[1].value.data<int64_t>()[i];
      if (!NormAxis(&idx, x.dims[0])) return Bad(n, absl::StrCat("index ", in[1].value.data<int64_t>()[i], " out of range"));
      out.v.push_back(x.v[idx]);
      out.k.push_back(x.k[idx]);
    }
    return FromArr(out);
  }
  if (op == "Slice") {
    // Any axes of a known value (PyTorch's pad arithmetic reverses the
    // rows of a [k, 2] matrix with step -1).
    ASSIGN_OR_RETURN(std::vector<int64_t> starts, ints_of(1, "starts"));
    ASSIGN_OR_RETURN(std::vector<int64_t> ends, ints_of(2, "ends"));
    std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
    std::iota(axes.begin(), axes.end(), 0);
    if (in.size() > 3 && !n.input(3).empty()) {
      ASSIGN_OR_RETURN(axes, ints_of(3, "axes"));
    }
    if (in.size() > 4 && !n.input(4).empty()) {
      ASSIGN_OR_RETURN(steps, ints_of(4, "steps"));
    }
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
      return Bad(n, "starts, ends, axes and steps differ in length");
    }
    std::vector<std::vector<int64_t>> pick(rank);
    for (int64_t a = 0; a < rank; ++a) {
      pick[a].resize(x.dims[a]);
      std::iota(pick[a].begin(), pick[a].end(), 0);
    }
    std::vector<bool> seen(rank, false);
    for (size_t j = 0; j < axes.size(); ++j) {
      int64_t a = axes[j];
      if (!NormAxis(&a, rank) || seen[a]) return Bad(n, absl::StrCat("axis ", axes[j], " out of range or repeated for rank ", rank));
      seen[a] = true;
      const int64_t dim = x.dims[a];
      int64_t step = steps[j];
      if (step == 0) return Bad(n, "step 0");
      // ONNX's clamping: [0, dim] going forward, [-1, dim - 1] backward.
      auto clampi = [&](int64_t v) {
        if (v < 0) v += dim;
        return step > 0 ? std::clamp<int64_t>(v, 0, dim) : std::clamp<int64_t>(v, -1, dim - 1);
      };
      step = std::clamp<int64_t>(step, -dim - 1, dim + 1);  // a larger one takes one element, without overflow
      pick[a].clear();
      for (int64_t i = clampi(starts[j]), e = clampi(ends[j]); step > 0 ? i < e : i > e; i += step) pick[a].push_back(i);
    }
    return FromArr(Gathered(x, pick, {}));
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);
    ASSIGN_OR_RETURN(perm, Ints(n, "perm", perm));
    if (static_cast<int64_t>(perm.size()) != rank) return Bad(n, absl::StrCat("perm has ", perm.size(), " axes for rank ", rank));
    std::vector<bool> seen(rank, false);
    std::vector<std::vector<int64_t>> pick(rank);
    for (int64_t i = 0; i < rank; ++i) {
      if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) return Bad(n, "perm is not a permutation of the input's axes");
      seen[perm[i]] = true;
      pick[i].resize(x.dims[perm[i]]);
      std::iota(pick[i].begin(), pick[i].end(), 0);
    }
    return FromArr(Gathered(x, pick, perm));
  }
  if (op == "Mul" || op == "Div" || op == "Add" || op == "Sub") {
    Arr y = ToArr(in[1]);
    const size_t nx = x.v.size(), ny = y.v.size();
    if (nx != ny && nx != 1 && ny != 1) return Unsupported(n, "arithmetic on known values of different sizes");
    Arr out = nx >= ny ? x : y;
    out.is_float = x.is_float || y.is_float;
    for (size_t i = 0; i < out.v.size(); ++i) {
      const double a = x.v[nx == 1 ? 0 : i], b = y.v[ny == 1 ? 0 : i];
      const int64_t ka = x.k[nx == 1 ? 0 : i], kb = y.k[ny == 1 ? 0 : i];
      double r;
      int64_t k = 0;
      if (ka || kb) {
        // Only "k times the batch" times or over a constant stays a
        // multiple of the batch.
        const double c = ka ? b : a;
        if (op == "Mul" && !(ka && kb) && c == std::trunc(c) && c > 0 && c <= kMaxElements &&
            (ka ? ka : kb) * c <= kMaxElements) {
          k = (ka ? ka : kb) * static_cast<int64_t>(c);
        } else if (op == "Div" && ka && !kb && b > 0 && ka % static_cast<int64_t>(b) == 0) {
          k = ka / static_cast<int64_t>(b);
        } else {
          return Unsupported(n, "arithmetic on the batch size other than multiplying or dividing it by a constant");
        }
        r = 0;
      } else if (op == "Mul") {
        r = a * b;
      } else if (op == "Add") {
        r = a + b;
      } else if (op == "Sub") {
        r = a - b;
      } else {
        if (!out.is_float && b == 0) return Bad(n, "integer division by zero");
        r = out.is_float ? a / b : std::trunc(a / b);
      }
      out.v[i] = r;
      out.k[i] = k;
    }
    if (out.is_float && !x.is_float && !y.is_float) return Bad(n, "inputs differ in data type");
    return FromArr(out);
  }
  if (op == "Sqrt") {
    if (!x.is_float) return Unsupported(n, "Sqrt of integers");
    for (double& v : x.v) v = std::sqrt(v);
    return FromArr(x);
  }
  if (op == "ConstantOfShape") {
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, ints_of(0, "shape"));
    for (int64_t d : shape) {
      if (d < 0) return Bad(n, "negative dim in the shape");
    }
    RETURN_IF_ERROR(CheckDims(shape, false, Where(n)));
    if (Product(shape) > kMaxFoldedElements) return Unsupported(n, "a constant too large to fold");
    Arr out;
    out.is_float = true;
    double fill = 0;
    if (const auto* a = Attr(n, "value")) {
      ASSIGN_OR_RETURN(Tensor t, OnnxTensor(a->t(), Where(n)));
      if (t.NumElements() != 1) return Bad(n, "value must hold one element");
      out.is_float = t.dtype() == DT_FLOAT;
      fill = out.is_float ? t.data<float>()[0] : static_cast<double>(t.data<int64_t>()[0]);
    }
    out.dims = shape;
    out.v.assign(Product(shape), fill);
    out.k.assign(out.v.size(), 0);
    return FromArr(out);
  }
  return Unsupported(n, "cannot be computed at import time");
}

absl::StatusOr<Val> Importer::Reshaped(const Node& n, const Val& in, std::vector<int64_t> target,
                                       std::vector<int64_t> target_batch, bool allowzero) {
  ASSIGN_OR_RETURN(Val x, Nchw(in, Hint(n)));
  if (target.size() > static_cast<size_t>(kMaxRank)) return Bad(n, "shape has too many dims");
  target_batch.resize(target.size(), 0);
  // The input: its constant dims' product and its batch multiple, each at
  // most kMaxElements (so their products fit in 64 bits).
  int64_t in_const = 1, in_k = 0;
  for (int64_t d : x.shape) {
    if (d < -kMaxElements || d > kMaxElements) return Bad(n, absl::StrCat("input dim ", d, " is out of range"));
    if (d < 0) {
      if (in_k) return Unsupported(n, absl::StrCat("input ", ShapeString(x.shape), " has two dims that depend on the batch"));
      in_k = -d;
    } else {
      in_const *= d;
      if (in_const > kMaxElements) return Bad(n, "the input has too many elements");
    }
  }
  Shape out(target.size());
  int64_t out_const = 1, out_k = 0, infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t d = target[i];
    if (target_batch[i] > kMaxElements) {
      return Bad(n, "a dim of the shape is too many times the batch");
    } else if (target_batch[i] > 0) {
      d = -target_batch[i];
    } else if (d == 0 && !allowzero) {
      if (i >= x.shape.size()) return Bad(n, absl::StrCat("shape ", ShapeString(target), " copies dim ", i, " the input lacks"));
      d = x.shape[i];
    } else if (d == -1) {
      if (infer >= 0) return Bad(n, "more than one -1 in the shape");
      infer = static_cast<int64_t>(i);
      continue;
    } else if (d < 0 || d > kMaxElements) {
      return Bad(n, absl::StrCat("shape has a bad dim ", d));
    } else if (d == 0) {
      return Unsupported(n, "allowzero with a 0 dim is not supported");
    }
    if (d < 0) {
      if (out_k) return Unsupported(n, "two dims of the shape depend on the batch");
      out_k = -d;
    } else {
      out_const *= d;
      if (out_const > kMaxElements) return Bad(n, "shape has too many elements");
    }
    out[i] = d;
  }
  auto mismatch = [&]() {
    if (in_k && !out_k && infer < 0) {
      return Unsupported(n, absl::StrCat("shape ", ShapeString(target),
                                         " fixes the batch size; export with a dynamic batch dimension (dynamic_axes)"));
    }
    return Bad(n, absl::StrCat("cannot reshape ", ShapeString(x.shape), " to ", ShapeString(target)));
  };
  if (infer >= 0) {
    if (in_k && !out_k) {
      // The inferred dim takes the batch: (in_k * in_const / out_const) times it.
      if (out_const == 0 || (in_k * in_const) % out_const != 0) {
        return Unsupported(n, absl::StrCat("reshaping ", ShapeString(x.shape), " to ", ShapeString(target),
                                           " splits the batch (the size would depend on it)"));
      }
      out[infer] = -(in_k * in_const / out_const);
      out_k = -out[infer];
      if (out_k > kMaxElements) return Bad(n, "the inferred dim is too many times the batch");
    } else if (in_k && out_k) {
      if (out_const == 0 || (in_k * in_const) % (out_k * out_const) != 0) return mismatch();
      out[infer] = in_k * in_const / (out_k * out_const);
      if (out[infer] > kMaxElements) return mismatch();
      out_const *= out[infer];
    } else if (!in_k && !out_k) {
      if (out_const == 0 || in_const % out_const != 0) return mismatch();
      out[infer] = in_const / out_const;
      out_const *= out[infer];
    } else {
      return mismatch();
    }
  }
  if (in_k * in_const != out_k * out_const || (in_k == 0) != (out_k == 0)) return mismatch();
  if (out == x.shape) return x;
  std::vector<int64_t> ours = out;
  for (int64_t& d : ours) d = d < 0 ? -1 : d;
  return Val{b_->Add("Reshape", Hint(n), {x.tensor}, {{"shape", AttrInts(ours)}}), out, false};
}

absl::StatusOr<Val> Importer::ReshapedTo(const Node& n, const Val& x, const Shape& shape) {
  std::vector<int64_t> values, batch;
  for (int64_t d : shape) {
    values.push_back(d < 0 ? 0 : d);
    batch.push_back(d < 0 ? -d : 0);
  }
  return Reshaped(n, x, values, batch, /*allowzero=*/true);
}

absl::Status Importer::ShapeNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"start", "end"}));
  Shape shape;
  auto ids = values_.find(n.input_size() > 0 ? n.input(0) : "");
  if (std::optional<Folded> k = Known(n, 0)) {
    shape = k->value.shape().dims();
  } else if (ids != values_.end() && ids->second.ids) {
    shape = ids->second.shape;  // shape arithmetic on the ids' batch
  } else {
    ASSIGN_OR_RETURN(Val x, In(n, 0));
    shape = x.shape;
  }
  const int64_t rank = static_cast<int64_t>(shape.size());
  ASSIGN_OR_RETURN(int64_t start, Int(n, "start", 0));
  ASSIGN_OR_RETURN(int64_t end, Int(n, "end", rank));
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  Arr a;
  for (int64_t i = start; i < end; ++i) {
    a.v.push_back(shape[i] < 0 ? 0 : static_cast<double>(shape[i]));
    a.k.push_back(shape[i] < 0 ? -shape[i] : 0);
  }
  a.dims = {static_cast<int64_t>(a.v.size())};
  constants_[n.output(0)] = FromArr(a);
  return absl::OkStatus();
}

absl::Status Importer::TransposeNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"perm"}));
  ASSIGN_OR_RETURN(Val x, In(n, 0, /*weight=*/true));
  ASSIGN_OR_RETURN(x, Nchw(x, Hint(n)));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> reversed(rank);
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  ASSIGN_OR_RETURN(std::vector<int64_t> perm, Ints(n, "perm", reversed));
  if (static_cast<int64_t>(perm.size()) != rank) return Bad(n, absl::StrCat("perm has ", perm.size(), " axes for rank ", rank));
  std::vector<bool> seen(rank, false);
  Shape out(rank);
  for (int64_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) return Bad(n, "perm is not a permutation of the input's axes");
    seen[perm[i]] = true;
    out[i] = x.shape[perm[i]];
  }
  std::vector<int64_t> identity(rank);
  std::iota(identity.begin(), identity.end(), 0);
  if (perm == identity) {
    Set(n, 0, x);
    return absl::OkStatus();
  }
  Set(n, 0, Val{b_->Add("Transpose", Hint(n), {x.tensor}, {{"perm", AttrInts(perm)}}), out, false});
  return absl::OkStatus();
}

absl::Status Importer::ConcatNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"axis"}));
  ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", 0));
  std::vector<Val> xs;
  for (int i = 0; i < n.input_size(); ++i) {
    ASSIGN_OR_RETURN(Val v, In(n, i, /*weight=*/true));
    ASSIGN_OR_RETURN(v, Nchw(v, Hint(n)));
    xs.push_back(v);
  }
  if (xs.empty()) return Bad(n, "has no inputs");
  Shape out = xs[0].shape;
  const int64_t rank = static_cast<int64_t>(out.size());
  if (!NormAxis(&axis, rank)) return Bad(n, absl::StrCat("axis out of range for rank ", rank));
  std::vector<std::string> tensors = {xs[0].tensor};
  for (size_t i = 1; i < xs.size(); ++i) {
    const Shape& s = xs[i].shape;
    if (static_cast<int64_t>(s.size()) != rank) return Bad(n, "inputs differ in rank");
    for (int64_t k = 0; k < rank; ++k) {
      if (k == axis) {
        if ((out[k] < 0) != (s[k] < 0)) return Unsupported(n, "concatenating along a batch-sized and a fixed-size axis");
        out[k] += s[k];
      } else if (out[k] != s[k]) {
        return Bad(n, absl::StrCat("input ", i, " is ", ShapeString(s), ", input 0 is ", ShapeString(xs[0].shape)));
      }
    }
    tensors.push_back(xs[i].tensor);
  }
  if (tensors.size() == 1) {
    Set(n, 0, xs[0]);
    return absl::OkStatus();
  }
  Set(n, 0, Val{b_->Add("ConcatV2", Hint(n), tensors, {{"axis", AttrI(axis)}}), out, false});
  return absl::OkStatus();
}

absl::Status Importer::SliceNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, opset_ < 10 ? std::set<std::string>{"starts", "ends", "axes"} : std::set<std::string>{}));
  ASSIGN_OR_RETURN(Val x, In(n, 0, /*weight=*/true));
  ASSIGN_OR_RETURN(x, Nchw(x, Hint(n)));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  auto vec = [&](int i, const char* attr, std::vector<int64_t> fallback) -> absl::StatusOr<std::vector<int64_t>> {
    if (opset_ < 10) return Ints(n, attr, fallback);
    if (!HasInput(n, i)) return fallback;
    std::optional<Folded> f = Known(n, i);
    if (!f || f->symbolic() || f->value.dtype() != DT_INT64 || f->value.shape().rank() != 1 || f->value.NumElements() > kMaxRank) {
      return Unsupported(n, absl::StrCat(attr, " must be a constant int64 vector"));
    }
    return std::vector<int64_t>(f->value.data<int64_t>(), f->value.data<int64_t>() + f->value.NumElements());
  };
  ASSIGN_OR_RETURN(std::vector<int64_t> starts, vec(1, "starts", {}));
  ASSIGN_OR_RETURN(std::vector<int64_t> ends, vec(2, "ends", {}));
  std::vector<int64_t> all(starts.size());
  std::iota(all.begin(), all.end(), 0);
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, vec(3, "axes", all));
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, vec(4, "steps", std::vector<int64_t>(starts.size(), 1)));
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return Bad(n, "starts, ends, axes and steps differ in length");
  }
  std::vector<int64_t> begin(rank, 0), size(rank, -1);
  Shape out = x.shape;
  std::vector<bool> seen(rank, false);
  for (size_t j = 0; j < starts.size(); ++j) {
    int64_t a = axes[j];
    if (!NormAxis(&a, rank) || seen[a]) return Bad(n, absl::StrCat("axis ", axes[j], " out of range or repeated"));
    seen[a] = true;
    if (steps[j] != 1) return Unsupported(n, absl::StrCat("step ", steps[j], " (only 1 is supported)"));
    const int64_t dim = x.shape[a];
    if (dim < 0) {
      if (starts[j] != 0 || ends[j] < kMaxElements) return Unsupported(n, "slicing the batch axis");
      continue;
    }
    auto clampi = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
    const int64_t s = clampi(starts[j]), e = std::max(s, clampi(ends[j]));
    begin[a] = s;
    size[a] = e - s;
    out[a] = e - s;
  }
  if (out == x.shape) {
    Set(n, 0, x);
    return absl::OkStatus();
  }
  Set(n, 0, Val{b_->Add("Slice", Hint(n), {x.tensor}, {{"begin", AttrInts(begin)}, {"size", AttrInts(size)}}), out, false});
  return absl::OkStatus();
}

absl::Status Importer::EmbeddingNode(const Node& n, const Val& ids) {
  const std::string& name = n.input(0);
  auto init = initializers_.find(name);
  if (constants_.count(name) || init == initializers_.end() ||
      init->second->data_type() != onnx::TensorProto::FLOAT) {
    return Unsupported(n, absl::StrCat("ids (\"", n.input(1), "\") gathered from \"", name,
                                       "\": only a float initializer can be looked up by run-time ids"));
  }
  ASSIGN_OR_RETURN(Tensor table, OnnxTensor(*init->second, absl::StrCat(Where(n), ": initializer \"", name, "\"")));
  if (table.shape().rank() != 2) {
    return Unsupported(n, absl::StrCat("table \"", name, "\" is ", table.shape().ToString(),
                                       "; ids look up rows of a [rows, dim] table"));
  }
  ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", 0));
  if (axis != 0 && axis != -2) return Unsupported(n, absl::StrCat("axis ", axis, "; ids look up rows (axis 0)"));
  const int64_t rows = table.shape().dim(0), dim = table.shape().dim(1);
  if (rows < 1 || dim < 1) return Bad(n, absl::StrCat("table \"", name, "\" is empty: ", table.shape().ToString()));
  Shape out = ids.shape;
  out.push_back(dim);
  RETURN_IF_ERROR(CheckDims(Shape(out.begin() + 1, out.end()), false, Where(n)));
  // Pulled by rows where this Gather is all that reads the table; a table
  // used whole elsewhere too (tied weights) stays dense.
  const auto& readers = readers_[name];
  const bool by_rows = options_.row_tables && !values_.count(name) && readers.size() == 1 && readers[0] == &n &&
                       std::count(n.input().begin(), n.input().end(), name) == 1;
  std::string index = ids.tensor;
  Val w;
  if (by_rows) {
    ASSIGN_OR_RETURN(w, NewVariable(name, table, VariableDef::FIXED_TABLE));
    for (NodeDef& node : *b_->graph()->mutable_node()) {
      if (node.name() == w.tensor) (*node.mutable_attr())["feature"] = AttrS(ids.tensor);
    }
    index = b_->Add("Placeholder", w.tensor + "/index", {}, {{"shape", AttrShape(ids.shape)}, {"dtype", AttrType(DT_INT64)}});
    result_.tables[w.tensor] = OnnxTable{ids.tensor, index};
  } else {
    ASSIGN_OR_RETURN(w, In(n, 0, /*weight=*/true));
  }
  Set(n, 0, Val{b_->Add("EmbeddingLookup", Hint(n), {w.tensor, index}), out, false});
  return absl::OkStatus();
}

absl::Status Importer::GatherNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"axis"}));
  if (HasInput(n, 0) && HasInput(n, 1)) {
    auto ids = values_.find(n.input(1));
    if (ids != values_.end() && ids->second.ids) return EmbeddingNode(n, ids->second);
  }
  std::optional<Folded> idx = Known(n, 1);
  if (!idx || idx->symbolic() || idx->value.dtype() != DT_INT64 || idx->value.shape().rank() > 1) {
    return Unsupported(n, "indices computed at run time are supported where they are an integer graph input (ids, "
                          "an embedding lookup); these are neither that nor constant");
  }
  ASSIGN_OR_RETURN(Val x, In(n, 0, /*weight=*/true));
  ASSIGN_OR_RETURN(x, Nchw(x, Hint(n)));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", 0));
  if (!NormAxis(&axis, rank)) return Bad(n, absl::StrCat("axis out of range for ", ShapeString(x.shape)));
  const int64_t dim = x.shape[axis];
  if (dim < 0) return Unsupported(n, "gathering along the batch axis");
  const int64_t count = idx->value.NumElements();
  if (count == 0) return Unsupported(n, "no indices");
  std::vector<int64_t> ids(idx->value.data<int64_t>(), idx->value.data<int64_t>() + count);
  for (int64_t& i : ids) {
    if (!NormAxis(&i, dim)) return Bad(n, absl::StrCat("index out of range for axis ", axis, " of ", ShapeString(x.shape)));
  }
  for (int64_t j = 1; j < count; ++j) {
    if (ids[j] != ids[0] + j) return Unsupported(n, "indices that are not one ascending run");
  }
  std::vector<int64_t> begin(rank, 0), size(rank, -1);
  begin[axis] = ids[0];
  size[axis] = count;
  Val y{b_->Add("Slice", Hint(n, "/slice"), {x.tensor}, {{"begin", AttrInts(begin)}, {"size", AttrInts(size)}}), x.shape, false};
  y.shape[axis] = count;
  if (idx->value.shape().rank() == 1) {
    Set(n, 0, y);
    return absl::OkStatus();
  }
  // A scalar index drops the axis.
  Shape dropped = y.shape;
  dropped.erase(dropped.begin() + axis);
  ASSIGN_OR_RETURN(Val z, ReshapedTo(n, y, dropped));
  Set(n, 0, z);
  return absl::OkStatus();
}

absl::Status Importer::SqueezeNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"axes"}));
  ASSIGN_OR_RETURN(Val x, In(n, 0, /*weight=*/true));
  const bool un = n.op_type() == "Unsqueeze";
  int64_t added = 0;
  if (un) {
    std::optional<Folded> a = HasInput(n, 1) ? Known(n, 1) : std::nullopt;
    added = Attr(n, "axes") != nullptr ? Attr(n, "axes")->ints_size() : (a ? a->value.NumElements() : 0);
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, AxesOf(n, static_cast<int64_t>(x.shape.size()) + added, un));
  Shape out;
  if (std::string why = Squeezed(x.shape, axes, un, &out); !why.empty()) return Bad(n, why);
  ASSIGN_OR_RETURN(Val y, ReshapedTo(n, x, out));
  Set(n, 0, y);
  return absl::OkStatus();
}

absl::StatusOr<Shape> Importer::ShapeInput(const Node& n, int i) {
  std::optional<Folded> shape = Known(n, i);
  if (!shape || shape->value.dtype() != DT_INT64 || shape->value.shape().rank() != 1 || shape->value.NumElements() > kMaxRank) {
    return Unsupported(n, "the shape must be known at import time (a constant or arithmetic on an input's Shape)");
  }
  Shape out;
  for (int64_t j = 0; j < shape->value.NumElements(); ++j) {
    const int64_t k = shape->batch.empty() ? 0 : shape->batch[j];
    if (k > kMaxElements) return Bad(n, "a dim of the shape is too many times the batch");
    const int64_t d = k > 0 ? -k : shape->value.data<int64_t>()[j];
    if (k == 0 && (d < 0 || d > kMaxElements)) return Bad(n, absl::StrCat("bad dim ", d, " in the shape"));
    out.push_back(d);
  }
  Shape fixed;
  for (int64_t d : out) fixed.push_back(d < 0 ? 1 : d);
  RETURN_IF_ERROR(CheckDims(fixed, false, Where(n)));
  return out;
}

absl::Status Importer::ExpandNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {}));
  ASSIGN_OR_RETURN(Shape target, ShapeInput(n, 1));
  ASSIGN_OR_RETURN(Val x, In(n, 0, /*weight=*/true));
  ASSIGN_OR_RETURN(x, Nchw(x, Hint(n)));
  // Expand broadcasts both ways: a 1 in the shape keeps the input's dim.
  Shape out;
  const size_t rank = std::max(target.size(), x.shape.size());
  for (size_t i = 0; i < rank; ++i) {
    const int64_t a = i < rank - x.shape.size() ? 1 : x.shape[i - (rank - x.shape.size())];
    const int64_t t = i < rank - target.size() ? 1 : target[i - (rank - target.size())];
    if (t == 1 || t == a) {
      out.push_back(a);
    } else if (a == 1) {
      out.push_back(t);
    } else {
      return Bad(n, absl::StrCat("input ", ShapeString(x.shape), " does not expand to ", ShapeString(target)));
    }
  }
  if (out == x.shape) {
    Set(n, 0, x);
    return absl::OkStatus();
  }
  if (batch_ref_.empty()) return Unsupported(n, "no graph input gives the batch size");
  Set(n, 0, Val{b_->Add("BroadcastTo", Hint(n), {x.tensor, batch_ref_}, {{"shape", AttrInts(out)}}), out, false});
  return absl::OkStatus();
}

// A ConstantOfShape whose shape depends on the batch (a known one is folded).
absl::Status Importer::ConstantOfShapeNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"value"}));
  ASSIGN_OR_RETURN(Shape out, ShapeInput(n, 0));
  Tensor fill = Tensor::Scalar<float>(0.0f);
  if (const auto* a = Attr(n, "value")) {
    ASSIGN_OR_RETURN(fill, OnnxTensor(a->t(), Where(n)));
    if (fill.dtype() != DT_FLOAT || fill.NumElements() != 1) return Unsupported(n, "value must be one float");
    fill = Tensor::Scalar<float>(fill.data<float>()[0]);
  }
  if (batch_ref_.empty()) return Unsupported(n, "no graph input gives the batch size");
  const std::string c = b_->Add("Const", Hint(n, "/value"), {}, {{"value", AttrTensor(fill)}});
  Set(n, 0, Val{b_->Add("BroadcastTo", Hint(n), {c, batch_ref_}, {{"shape", AttrInts(out)}}), out, false});
  return absl::OkStatus();
}

absl::Status Importer::LayerNormNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"axis", "epsilon", "stash_type"}));
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty() && consumed_mask_.count(n.output(k))) {
      return Unsupported(n, absl::StrCat("output ", k, " (the mean or inverse deviation) is read"));
    }
  }
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  ASSIGN_OR_RETURN(x, Nchw(x, Hint(n)));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", -1));
  if (!NormAxis(&axis, rank)) return Bad(n, absl::StrCat("axis out of range for ", ShapeString(x.shape)));
  if (axis != rank - 1) return Unsupported(n, absl::StrCat("normalising over axes ", axis, ".. (only the last axis is supported)"));
  ASSIGN_OR_RETURN(float eps, Float(n, "epsilon", 1e-5f));
  if (!(eps > 0 && eps < 1)) return Bad(n, absl::StrCat("epsilon ", eps, " is not in (0, 1)"));
  const int64_t dim = x.shape.back();
  if (dim <= 0) return Unsupported(n, "the normalised axis has no fixed size");
  ASSIGN_OR_RETURN(Val scale, In(n, 1, /*weight=*/true));
  Val bias;
  if (HasInput(n, 2)) {
    ASSIGN_OR_RETURN(bias, In(n, 2, /*weight=*/true));
  } else {
    Tensor zeros = Tensor::FromVector<float>(std::vector<float>(dim, 0.0f), TensorShape({dim}));
    bias = Val{b_->Add("Const", Hint(n, "/zero_bias"), {}, {{"value", AttrTensor(zeros)}}), {dim}, false};
  }
  for (const Val* v : {&scale, &bias}) {
    if (v->shape != Shape{dim}) {
      return Unsupported(n, absl::StrCat(v == &scale ? "scale " : "B ", ShapeString(v->shape), " is not [", dim, "]"));
    }
  }
  Set(n, 0, Val{b_->Add("LayerNorm", Hint(n), {x.tensor, scale.tensor, bias.tensor}, {{"epsilon", AttrF(eps)}}), x.shape, false});
  return absl::OkStatus();
}

// MatMul beyond two matrices: [..., M, K] x [K, N] (a Linear over a
// sequence) as one matrix product of the flattened rows; equal ranks with
// the same leading dims (attention's scores and mixing) as BatchMatMul.
absl::Status Importer::MatMulNode(const Node& n) {
  ASSIGN_OR_RETURN(Val a, In(n, 0, true));
  ASSIGN_OR_RETURN(Val b, In(n, 1, true));
  ASSIGN_OR_RETURN(a, Nchw(a, Hint(n)));
  ASSIGN_OR_RETURN(b, Nchw(b, Hint(n)));
  const size_t ra = a.shape.size(), rb = b.shape.size();
  if (ra < 2 || rb < 2) return Unsupported(n, "1-D operands are not supported");
  const int64_t k = a.shape[ra - 1];
  if (k < 0 || k != b.shape[rb - 2]) {
    return Bad(n, absl::StrCat("inner dimensions differ: ", ShapeString(a.shape), " x ", ShapeString(b.shape)));
  }
  Shape out(a.shape.begin(), a.shape.end() - 1);
  out.push_back(b.shape[rb - 1]);
  if (rb == 2) {
    ASSIGN_OR_RETURN(Val rows, Reshaped(n, a, {-1, k}));
    const std::string y = b_->Add("MatMul", Hint(n), {rows.tensor, b.tensor});
    ASSIGN_OR_RETURN(Val z, ReshapedTo(n, Val{y, {rows.shape[0], out.back()}, false}, out));
    Set(n, 0, z);
    return absl::OkStatus();
  }
  if (ra != rb || !std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin())) {
    return Unsupported(n, absl::StrCat("operands ", ShapeString(a.shape), " x ", ShapeString(b.shape),
                                       ": batched products need equal leading dims (no broadcasting)"));
  }
  Set(n, 0, Val{b_->Add("BatchMatMul", Hint(n), {a.tensor, b.tensor}), out, false});
  return absl::OkStatus();
}

absl::Status Importer::SoftmaxNode(const Node& n) {
  const std::string& op = n.op_type();
  RETURN_IF_ERROR(OnlyAttrs(n, {"axis"}));
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  ASSIGN_OR_RETURN(x, Nchw(x, Hint(n)));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", opset_ >= 13 ? -1 : 1));
  if (rank == 0 || !NormAxis(&axis, rank)) return Bad(n, absl::StrCat("axis out of range for ", ShapeString(x.shape)));
  if (opset_ < 13 && axis != rank - 1) {
    return Unsupported(n, "before opset 13 Softmax flattens from its axis; only the last axis is supported there");
  }
  if (axis == rank - 1) {
    Set(n, 0, Val{b_->Add(op, Hint(n), {x.tensor}), x.shape, false});
    return absl::OkStatus();
  }
  // Over another axis: swapped to the end and back.
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[axis], perm[rank - 1]);
  const std::string t = b_->Add("Transpose", Hint(n, "/to_last"), {x.tensor}, {{"perm", AttrInts(perm)}});
  const std::string s = b_->Add(op, Hint(n), {t});
  Set(n, 0, Val{b_->Add("Transpose", Hint(n, "/back"), {s}, {{"perm", AttrInts(perm)}}), x.shape, false});
  return absl::OkStatus();
}

// Erf, Sqrt, Pow (a constant exponent) and Gelu (opset 20; as PyTorch
// writes it for opset 18 it arrives as Div, Erf, Add, Mul already).
absl::Status Importer::MathNode(const Node& n) {
  const std::string& op = n.op_type();
  RETURN_IF_ERROR(OnlyAttrs(n, op == "Gelu" ? std::set<std::string>{"approximate"} : std::set<std::string>{}));
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  if (op == "Erf" || op == "Sqrt") {
    Set(n, 0, Val{b_->Add(op, Hint(n), {x.tensor}), x.shape, x.nhwc});
    return absl::OkStatus();
  }
  if (op == "Pow") {
    std::optional<Folded> e = Known(n, 1);
    if (!e || e->symbolic() || e->value.NumElements() != 1) return Unsupported(n, "the exponent must be a constant scalar");
    const float exponent = e->value.dtype() == DT_FLOAT ? e->value.data<float>()[0] : static_cast<float>(e->value.data<int64_t>()[0]);
    if (!std::isfinite(exponent)) return Bad(n, "the exponent is not finite");
    Set(n, 0, Val{b_->Add("Pow", Hint(n), {x.tensor}, {{"exponent", AttrF(exponent)}}), x.shape, x.nhwc});
    return absl::OkStatus();
  }
  // Gelu: x * 0.5 * (1 + erf(x / sqrt 2)), or its tanh approximation.
  ASSIGN_OR_RETURN(std::string approx, String(n, "approximate", "none"));
  auto scalar = [&](const std::string& name, float v) {
    return b_->Add("Const", Hint(n, "/" + name), {}, {{"value", AttrTensor(Tensor::Scalar<float>(v))}});
  };
  if (approx == "none") {
    Set(n, 0, Val{b_->Add("Gelu", Hint(n), {x.tensor}), x.shape, x.nhwc});
    return absl::OkStatus();
  }
  std::string inner;
  if (approx == "tanh") {
    // tanh(sqrt(2 / pi) * (x + 0.044715 x^3))
    const std::string cube = b_->Add("Pow", Hint(n, "/cube"), {x.tensor}, {{"exponent", AttrF(3.0f)}});
    const std::string sum = b_->Add("AddN", Hint(n, "/sum"), {x.tensor, b_->Add("BroadcastMul", Hint(n, "/c3"), {cube, scalar("c", 0.044715f)})});
    inner = b_->Add("Tanh", Hint(n, "/tanh"), {b_->Add("BroadcastMul", Hint(n, "/k"), {sum, scalar("k", 0.7978845608f)})});
  } else {
    return Unsupported(n, absl::StrCat("approximate \"", approx, "\""));
  }
  const std::string half = b_->Add("BroadcastMul", Hint(n, "/half"), {x.tensor, scalar("half", 0.5f)});
  const std::string one_plus = b_->Add("BroadcastAdd", Hint(n, "/one_plus"), {inner, scalar("one", 1.0f)});
  Set(n, 0, Val{b_->Add("BroadcastMul", Hint(n), {half, one_plus}), x.shape, x.nhwc});
  return absl::OkStatus();
}

std::optional<int> Importer::GeluInputOf(const Node& n) const {
  // The node producing input i of n if it is `op`; its constant operand
  // (a float scalar near `value`) is the other input, whose index is
  // returned in *other.
  auto made_by = [&](const Node& m, int i, const std::string& op) -> const Node* {
    auto p = i < m.input_size() ? producer_.find(m.input(i)) : producer_.end();
    const size_t inputs = op == "Erf" ? 1 : 2;
    return p != producer_.end() && p->second->op_type() == op && p->second->input_size() == static_cast<int>(inputs)
               ? p->second
               : nullptr;
  };
  auto scalar = [&](const Node& m, int i, double value) {
    std::optional<Folded> f = Known(m, i);
    return f && !f->symbolic() && f->value.dtype() == DT_FLOAT && f->value.NumElements() == 1 &&
           std::fabs(f->value.data<float>()[0] - value) <= 1e-6 * std::fabs(value);
  };
  // With (c, k) one of (0, 1), (1, 0): node m's input c is the constant
  // `value` and input k what follows.
  auto other = [&](const Node& m, double value) -> int {
    if (scalar(m, 1, value)) return 0;
    if (scalar(m, 0, value)) return 1;
    return -1;
  };
  for (int x = 0; x < 2; ++x) {
    const Node* half = made_by(n, 1 - x, "Mul");
    if (half == nullptr) continue;
    const int a = other(*half, 0.5);
    const Node* add = a < 0 ? nullptr : made_by(*half, a, "Add");
    if (add == nullptr) continue;
    const int e = other(*add, 1.0);
    const Node* erf = e < 0 ? nullptr : made_by(*add, e, "Erf");
    if (erf == nullptr) continue;
    auto d = producer_.find(erf->input(0));
    if (d == producer_.end() || d->second->input_size() != 2 || d->second->input(0) != n.input(x)) continue;
    const Node& scale = *d->second;
    if ((scale.op_type() == "Div" && scalar(scale, 1, std::sqrt(2.0))) ||
        (scale.op_type() == "Mul" && scalar(scale, 1, std::sqrt(0.5)))) {
      return x;
    }
  }
  return std::nullopt;
}

absl::Status Importer::CastNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, n.op_type() == "Cast" ? std::set<std::string>{"to", "saturate"} : std::set<std::string>{"saturate"}));
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  bool to_float = false;
  if (n.op_type() == "Cast") {
    ASSIGN_OR_RETURN(int64_t to, Int(n, "to", 0));
    to_float = to == onnx::TensorProto::FLOAT;
  } else if (std::optional<Folded> like = Known(n, 1)) {
    to_float = like->value.dtype() == DT_FLOAT;
  } else {
    auto v = values_.find(n.input(1));
    to_float = v != values_.end();  // every value of our graph is float
  }
  if (!to_float) return Unsupported(n, "casting a computed float tensor to another type");
  Set(n, 0, x);
  return absl::OkStatus();
}

}  // namespace onnx_internal
}  // namespace psrt
