#include "common/graph/onnx_import.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <numeric>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/graph/onnx_importer.h"
#include "common/graph/shape_util.h"
#include "common/status_macros.h"
#include "google/protobuf/io/coded_stream.h"

namespace psrt {
namespace onnx_internal {

absl::Status CheckDims(const Shape& s, bool unknown_ok, const std::string& what) {
  if (s.size() > static_cast<size_t>(kMaxRank)) return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", s.size(), " > ", kMaxRank));
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0 && !(unknown_ok && d == -1)) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dim ", d));
    if (d > kMaxElements) return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", d, " is too large"));
    if (d < 0) continue;
    n *= d;
    if (n > kMaxElements) return absl::InvalidArgumentError(absl::StrCat(what, ": more than 2^31 elements"));
  }
  return absl::OkStatus();
}

}  // namespace onnx_internal

using onnx_internal::CheckDims;
using onnx_internal::Product;


absl::StatusOr<Tensor> OnnxTensor(const onnx::TensorProto& t, const std::string& what) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL || t.external_data_size() > 0) {
    return absl::UnimplementedError(absl::StrCat(what, ": its values are in an external file; save the model with them inside"));
  }
  Shape dims(t.dims().begin(), t.dims().end());
  RETURN_IF_ERROR(CheckDims(dims, false, what));
  const int64_t n = Product(dims);
  const std::string& raw = t.raw_data();
  auto count = [&](int64_t have, const char* field) -> absl::Status {
    if (have != n) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape ", ShapeString(dims), " has ", n, " elements, ",
                                                     field, " holds ", have));
    }
    return absl::OkStatus();
  };
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: {
      if (t.has_raw_data()) {
        if (raw.size() % 4 != 0) return count(-1, "raw_data (bytes not a multiple of 4)");
        RETURN_IF_ERROR(count(static_cast<int64_t>(raw.size() / 4), "raw_data"));
      } else {
        RETURN_IF_ERROR(count(t.float_data_size(), "float_data"));
      }
      Tensor out(DT_FLOAT, TensorShape(dims));
      if (t.has_raw_data()) {
        if (n > 0) std::memcpy(out.data<float>(), raw.data(), raw.size());  // little-endian hosts only
      } else {
        std::copy(t.float_data().begin(), t.float_data().end(), out.data<float>());
      }
      return out;
    }
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::INT32: {
      const bool wide = t.data_type() == onnx::TensorProto::INT64;
      const size_t size = wide ? 8 : 4;
      if (t.has_raw_data()) {
        if (raw.size() % size != 0) return count(-1, "raw_data (bytes not a multiple of the element size)");
        RETURN_IF_ERROR(count(static_cast<int64_t>(raw.size() / size), "raw_data"));
      } else {
        RETURN_IF_ERROR(count(wide ? t.int64_data_size() : t.int32_data_size(), wide ? "int64_data" : "int32_data"));
      }
      Tensor out(DT_INT64, TensorShape(dims));
      int64_t* o = out.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        if (t.has_raw_data()) {
          if (wide) {
            std::memcpy(&o[i], raw.data() + i * 8, 8);
          } else {
            int32_t v;
            std::memcpy(&v, raw.data() + i * 4, 4);
            o[i] = v;
          }
        } else {
          o[i] = wide ? t.int64_data(i) : t.int32_data(i);
        }
      }
      return out;
    }
    case onnx::TensorProto::BOOL: {  // as int64 0 / 1 (Dropout's training_mode)
      if (t.has_raw_data()) {
        RETURN_IF_ERROR(count(static_cast<int64_t>(raw.size()), "raw_data"));
      } else {
        RETURN_IF_ERROR(count(t.int32_data_size(), "int32_data"));
      }
      Tensor out(DT_INT64, TensorShape(dims));
      for (int64_t i = 0; i < n; ++i) {
        out.data<int64_t>()[i] = (t.has_raw_data() ? raw[i] : t.int32_data(i)) != 0;
      }
      return out;
    }
    default:
      return absl::UnimplementedError(absl::StrCat(what, ": data type ", t.data_type(),
                                                   " is not supported (FLOAT, INT64, INT32 and BOOL are)"));
  }
}

namespace onnx_internal {


absl::StatusOr<Val> Importer::In(const Node& n, int i, bool weight) {
  if (!HasInput(n, i)) return Bad(n, absl::StrCat("input ", i, " is missing"));
  const std::string& name = n.input(i);
  auto v = values_.find(name);
  if (v != values_.end() && v->second.ids) {
    return Unsupported(n, absl::StrCat("input ", i, " (\"", name, "\") is integer ids used as data; only a Gather ",
                                       "on a float initializer (an embedding lookup) reads them"));
  }
  if (v != values_.end()) return v->second;  // the first use decided variable or constant
  auto c = constants_.find(name);
  const onnx::TensorProto* init = nullptr;
  Tensor t;
  if (c != constants_.end()) {
    if (c->second.symbolic()) {
      return Unsupported(n, absl::StrCat("input ", i, " (\"", name, "\") is shape arithmetic on the batch size used as data"));
    }
    t = c->second.value;
  } else {
    auto it = initializers_.find(name);
    if (it == initializers_.end()) {
      return Bad(n, absl::StrCat("input \"", name, "\" is no graph input, initializer or earlier node's output"));
    }
    init = it->second;
    ASSIGN_OR_RETURN(t, OnnxTensor(*init, absl::StrCat(Where(n), ": initializer \"", name, "\"")));
  }
  if (t.dtype() != DT_FLOAT) {
    // Our kernels compute in float; an integer value is only read at
    // import time (shapes, axes, indices).
    return Unsupported(n, absl::StrCat("input ", i, " (\"", name, "\") is an integer tensor used as data"));
  }
  Val out{"", t.shape().dims(), false};
  if (weight && init != nullptr && t.dtype() == DT_FLOAT) {
    ASSIGN_OR_RETURN(out, NewVariable(name, t, VariableDef::DENSE));
  } else {
    out.tensor = b_->Add("Const", Sanitize(name), {}, {{"value", AttrTensor(t)}});
  }
  values_[name] = out;
  return out;
}

absl::StatusOr<Val> Importer::NewVariable(const std::string& name, const Tensor& t, VariableDef::Kind kind) {
  Val out{"", t.shape().dims(), false};
  VariableDef def;
  def.set_name(b_->UniqueName(Sanitize(name)));
  def.set_kind(kind);
  def.set_dtype(DT_FLOAT);
  for (int64_t d : out.shape) def.mutable_shape()->add_dim(d);
  def.mutable_initializer()->set_kind(InitializerDef::TENSOR);
  t.ToProto(def.mutable_initializer()->mutable_tensor());
  def.set_seed(options_.seed);
  Shape node_shape = out.shape;
  if (kind != VariableDef::DENSE) node_shape[0] = -1;  // fed the batch's rows only
  // UniqueName reserved the name; the node takes it as is.
  NodeDef* node = b_->graph()->add_node();
  node->set_name(def.name());
  node->set_op("Variable");
  (*node->mutable_attr())["shape"] = AttrShape(node_shape);
  (*node->mutable_attr())["dtype"] = AttrType(DT_FLOAT);
  out.tensor = def.name();
  out.shape = node_shape;
  result_.variable_of[name] = def.name();
  result_.variables.push_back(std::move(def));
  return out;
}

absl::StatusOr<Tensor> Importer::Static(const Node& n, int i) {
  if (!HasInput(n, i)) return Bad(n, absl::StrCat("input ", i, " is missing"));
  const std::string& name = n.input(i);
  auto c = constants_.find(name);
  if (c != constants_.end()) {
    if (c->second.symbolic()) return Unsupported(n, absl::StrCat("input ", i, " (\"", name, "\") depends on the batch size"));
    return c->second.value;
  }
  auto it = initializers_.find(name);
  if (it == initializers_.end()) {
    return Unsupported(n, absl::StrCat("input ", i, " (\"", name,
                                       "\") must be a constant (an initializer or a Constant node); computed ones are not supported"));
  }
  return OnnxTensor(*it->second, absl::StrCat(Where(n), ": initializer \"", name, "\""));
}

absl::StatusOr<Val> Importer::Nchw(Val v, const std::string& hint) {
  if (!v.nhwc) return v;
  v.tensor = b_->Add("Transpose", hint + "/to_nchw", {v.tensor}, {{"perm", AttrInts({0, 3, 1, 2})}});
  v.nhwc = false;
  return v;
}

absl::StatusOr<Val> Importer::Nhwc(const Node& n, Val v) {
  if (v.nhwc) return v;
  if (v.shape.size() != 4) return Bad(n, absl::StrCat("input must be 4-D NCHW, got ", ShapeString(v.shape)));
  v.tensor = b_->Add("Transpose", Hint(n, "/to_nhwc"), {v.tensor}, {{"perm", AttrInts({0, 2, 3, 1})}});
  v.nhwc = true;
  return v;
}

absl::Status Importer::Bind(const onnx::ValueInfoProto& input, const OnnxFeed& feed) {
  const std::string where = absl::StrCat("ONNX graph input \"", input.name(), "\"");
  if (!input.type().has_tensor_type()) return absl::UnimplementedError(absl::StrCat(where, ": not a tensor"));
  const auto& tt = input.type().tensor_type();
  const bool integer = tt.elem_type() == onnx::TensorProto::INT64 || tt.elem_type() == onnx::TensorProto::INT32;
  if (tt.elem_type() != onnx::TensorProto::FLOAT && !integer) {
    return absl::UnimplementedError(absl::StrCat(where, ": element type ", tt.elem_type(),
                                                 " (FLOAT inputs are fed, and INT64 or INT32 ids)"));
  }
  if (integer != (feed.dtype == DT_INT64)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is ", integer ? "integer ids" : "FLOAT", " but its feature \"", feed.tensor, "\" is ",
        integer ? "float (give the feature dtype: DT_INT64)" : "integer ids (dtype: DT_INT64)"));
  }
  Shape declared;
  for (const auto& d : tt.shape().dim()) {
    declared.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
  RETURN_IF_ERROR(CheckDims(declared, true, where));
  if (declared.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": has no batch dimension"));
  declared[0] = -1;
  for (size_t i = 1; i < declared.size(); ++i) {
    if (declared[i] < 0) return absl::UnimplementedError(absl::StrCat(where, ": dim ", i, " is symbolic; only the batch may be"));
  }
  const Shape f(feed.shape.begin() + std::min<size_t>(1, feed.shape.size()), feed.shape.end());
  const Shape d(declared.begin() + 1, declared.end());
  Val v{feed.tensor, declared, false, integer};
  if (f == d) {
    values_[input.name()] = v;
    return absl::OkStatus();
  }
  if (integer) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is ", ShapeString(declared), " but its feature \"",
                                                   feed.tensor, "\" is ", ShapeString(feed.shape),
                                                   " (ids are fed in the input's own shape)"));
  }
  // An image feature [H, W, C] for PyTorch's [C, H, W]: carried as NHWC.
  if (f.size() == 3 && d.size() == 3 && f[0] == d[1] && f[1] == d[2] && f[2] == d[0]) {
    v.nhwc = true;
    values_[input.name()] = v;
    return absl::OkStatus();
  }
  // Another shape of the same elements, where that cannot reorder channels.
  const bool channels = f.size() == 3 && f[2] > 1;
  if (!channels && Product(f) == Product(d)) {
    Shape target = declared;
    v.tensor = b_->Add("Reshape", Sanitize(input.name()) + "/reshape", {feed.tensor}, {{"shape", AttrInts(target)}});
    values_[input.name()] = v;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(where, " is ", ShapeString(declared), " but its feature \"", feed.tensor,
                                                 "\" is ", ShapeString(feed.shape)));
}

// Conv (with its bias), MaxPool or AveragePool on the NHWC kernels:
// strides, dilations (not AveragePool's), pads (explicit or auto_pad) and
// groups, as common/graph/window.h takes them.
absl::StatusOr<Val> Importer::Window(const Node& n, const std::string& op) {
  const bool conv = op == "Conv";
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  auto padded = conv_pads_.find(n.input(0));  // x.shape is the padded one
  if (x.shape.size() != 4) return Unsupported(n, absl::StrCat("input ", ShapeString(x.shape), " is not 4-D NCHW (only 2-D windows are supported)"));
  for (int i = 1; i < 4; ++i) {
    if (x.shape[i] < 0) return Unsupported(n, absl::StrCat("input ", ShapeString(x.shape), " has unknown dims past the batch"));
  }
  constexpr int64_t kMaxWindow = 1024;
  Val w;
  int64_t kh, kw, filters = x.shape[1], group = 1;
  if (conv) {
    RETURN_IF_ERROR(OnlyAttrs(n, {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"}));
    ASSIGN_OR_RETURN(w, In(n, 1, /*weight=*/true));
    if (w.shape.size() != 4) return Bad(n, absl::StrCat("weight ", ShapeString(w.shape), " is not [out, in/group, kh, kw]"));
    ASSIGN_OR_RETURN(group, Int(n, "group", 1));
    if (group < 1 || group > x.shape[1] || x.shape[1] % group != 0 || w.shape[0] % group != 0) {
      return Bad(n, absl::StrCat("group ", group, " does not divide the input channels ", x.shape[1], " and the ",
                                 w.shape[0], " filters"));
    }
    if (w.shape[1] * group != x.shape[1]) {
      return Bad(n, absl::StrCat("weight ", ShapeString(w.shape), " does not fit input ", ShapeString(x.shape), " in ",
                                 group, " groups"));
    }
    filters = w.shape[0];
    kh = w.shape[2];
    kw = w.shape[3];
  } else {
    if (op == "MaxPool") {
      RETURN_IF_ERROR(OnlyAttrs(n, {"kernel_shape", "strides", "pads", "dilations", "auto_pad", "ceil_mode", "storage_order"}));
      ASSIGN_OR_RETURN(int64_t storage, Int(n, "storage_order", 0));
      if (storage != 0) return Unsupported(n, "storage_order 1 is not supported");
      if (n.output_size() > 1 && !n.output(1).empty() && consumed_mask_.count(n.output(1))) {
        return Unsupported(n, "the Indices output is not supported");
      }
    } else {
      RETURN_IF_ERROR(OnlyAttrs(n, {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "count_include_pad"}));
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> ks, Ints(n, "kernel_shape", {}));
    if (ks.size() != 2) return Bad(n, "kernel_shape must have 2 values");
    kh = ks[0];
    kw = ks[1];
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> ks, Ints(n, "kernel_shape", {kh, kw}));
  if (ks != std::vector<int64_t>{kh, kw}) return Bad(n, "kernel_shape does not match the weight");
  if (kh < 1 || kw < 1 || kh > kMaxWindow || kw > kMaxWindow) return Bad(n, absl::StrCat("kernel size ", kh, "x", kw));
  ASSIGN_OR_RETURN(std::vector<int64_t> strides, Ints(n, "strides", {1, 1}));
  ASSIGN_OR_RETURN(std::vector<int64_t> dil, Ints(n, "dilations", {1, 1}));
  for (const auto* v : {&strides, &dil}) {
    if (v->size() != 2 || (*v)[0] < 1 || (*v)[1] < 1 || (*v)[0] > kMaxWindow || (*v)[1] > kMaxWindow) {
      return Bad(n, absl::StrCat(v == &strides ? "strides" : "dilations", " [", absl::StrJoin(*v, ","),
                                 "] must be 2 values in [1, ", kMaxWindow, "]"));
    }
  }
  const int64_t ext_h = dil[0] * (kh - 1) + 1, ext_w = dil[1] * (kw - 1) + 1;
  ASSIGN_OR_RETURN(std::string auto_pad, String(n, "auto_pad", "NOTSET"));
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, Ints(n, "pads", {0, 0, 0, 0}));
  // ONNX's pads are [top, left, bottom, right], as ours.
  if (auto_pad == "VALID") {
    pads = {0, 0, 0, 0};
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const bool lower = auto_pad == "SAME_LOWER";
    auto same = [&](int64_t in, int64_t ext, int64_t s) {
      const int64_t total = std::max<int64_t>(0, ((in + s - 1) / s - 1) * s + ext - in);
      const int64_t small = total / 2, big = total - small;
      return lower ? std::make_pair(big, small) : std::make_pair(small, big);
    };
    auto [t, bo] = same(x.shape[2], ext_h, strides[0]);
    auto [l, r] = same(x.shape[3], ext_w, strides[1]);
    pads = {t, l, bo, r};
  } else if (auto_pad != "NOTSET") {
    return Unsupported(n, absl::StrCat("auto_pad ", auto_pad, " is not supported"));
  }
  if (pads.size() != 4) return Bad(n, "pads must have 4 values");
  for (int64_t p : pads) {
    if (p < 0 || p > kMaxWindow) return Bad(n, absl::StrCat("pad ", p, " is out of range [0, ", kMaxWindow, "]"));
  }
  auto out_dim = [](int64_t in, int64_t before, int64_t after, int64_t ext, int64_t s, bool ceil) {
    const int64_t span = in + before + after - ext;
    if (span < 0) return int64_t{0};
    int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
    // A ceil window must start inside the input or its leading pad.
    if (ceil && (o - 1) * s >= in + before) --o;
    return o;
  };
  const int64_t oh = out_dim(x.shape[2], pads[0], pads[2], ext_h, strides[0], false);
  const int64_t ow = out_dim(x.shape[3], pads[1], pads[3], ext_w, strides[1], false);
  if (oh <= 0 || ow <= 0) return Bad(n, absl::StrCat("window ", kh, "x", kw, " does not fit input ", ShapeString(x.shape)));
  ASSIGN_OR_RETURN(int64_t ceil_mode, Int(n, "ceil_mode", 0));
  if (ceil_mode != 0 && (out_dim(x.shape[2], pads[0], pads[2], ext_h, strides[0], true) != oh ||
                         out_dim(x.shape[3], pads[1], pads[3], ext_w, strides[1], true) != ow)) {
    return Unsupported(n, "ceil_mode 1 is not supported where it changes the output");
  }
  if (padded != conv_pads_.end()) {
    for (int i = 0; i < 4; ++i) pads[i] += padded->second[i];
  }
  Attrs attrs = {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts(pads)}, {"strides", AttrInts(strides)}};
  if (pads == std::vector<int64_t>{0, 0, 0, 0}) attrs = {{"padding", AttrS("VALID")}, {"strides", AttrInts(strides)}};
  if (dil != std::vector<int64_t>{1, 1}) attrs["dilations"] = AttrInts(dil);
  ASSIGN_OR_RETURN(x, Nhwc(n, x));
  Val y{"", {x.shape[0], filters, oh, ow}, true};
  if (!conv) {
    attrs["ksizes"] = AttrInts({kh, kw});
    if (op == "AveragePool") {
      ASSIGN_OR_RETURN(int64_t include_pad, Int(n, "count_include_pad", 0));
      if (include_pad != 0) attrs["count_include_pad"] = AttrB(true);
    }
    y.tensor = b_->Add(op == "MaxPool" ? "MaxPool" : "AvgPool", Hint(n), {x.tensor}, attrs);
    return y;
  }
  if (group > 1) attrs["group"] = AttrI(group);
  // [out, in/group, kh, kw] -> [kh, kw, in/group, out]: group j's filters
  // stay columns [j*out/group, (j+1)*out/group), as the kernels take them.
  std::string k = b_->Add("Transpose", Hint(n, "/kernel_hwio"), {w.tensor}, {{"perm", AttrInts({2, 3, 1, 0})}});
  y.tensor = b_->Add("Conv2D", Hint(n), {x.tensor, k}, attrs);
  if (HasInput(n, 2)) {
    ASSIGN_OR_RETURN(Val bias, In(n, 2, /*weight=*/true));
    if (bias.shape != Shape{filters}) return Bad(n, absl::StrCat("bias ", ShapeString(bias.shape), " is not [", filters, "]"));
    y.tensor = b_->Add("BiasAdd", Hint(n, "/bias_add"), {y.tensor, bias.tensor});
  }
  return y;
}

// NumPy broadcasting of ONNX shapes (-1: the batch, unknown); false where
// two known dims differ and neither is 1.
bool BroadcastOnnx(const Shape& a, const Shape& b, Shape* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == 1 || da == db) {
      (*out)[i] = db;
    } else if (db == 1) {
      (*out)[i] = da;
    } else if (da < 0 || db < 0) {
      (*out)[i] = std::max(da, db);
    } else {
      return false;
    }
  }
  return true;
}

// v as a 4-D NHWC value for broadcasting against one: a 4-D NCHW value is
// transposed, a lower-rank one with known dims gets leading 1s first (ONNX
// aligns trailing axes). Null where neither applies.
absl::StatusOr<std::optional<Val>> Importer::AsNhwc(const Node& n, Val v) {
  if (v.nhwc) return std::optional<Val>(v);
  if (v.shape.size() > 4) return std::optional<Val>();
  if (v.shape.size() < 4) {
    for (int64_t d : v.shape) {
      if (d < 0) return std::optional<Val>();
    }
    Shape four(4 - v.shape.size(), 1);
    four.insert(four.end(), v.shape.begin(), v.shape.end());
    v.tensor = b_->Add("Reshape", Hint(n, "/rank4"), {v.tensor}, {{"shape", AttrInts(four)}});
    v.shape = four;
  }
  ASSIGN_OR_RETURN(v, Nhwc(n, v));
  return std::optional<Val>(v);
}

// a (op) c for Add, Sub, Mul, Div with ONNX's broadcasting. Same shapes and
// a bias along the last axis keep their fused ops (AddN, BiasAdd); values
// carried NHWC stay so when the other operand can be laid out alike.
absl::StatusOr<Val> Importer::Arithmetic(const Node& n, const std::string& op, Val a, Val c) {
  Shape shape;
  if (!BroadcastOnnx(a.shape, c.shape, &shape)) {
    return Bad(n, absl::StrCat("shapes ", ShapeString(a.shape), " and ", ShapeString(c.shape), " do not broadcast"));
  }
  const std::string ours = "Broadcast" + op;
  if (op == "Add" && a.nhwc && c.nhwc && a.shape == c.shape) {
    return Val{b_->Add("AddN", Hint(n), {a.tensor, c.tensor}), a.shape, true};
  }
  if ((a.nhwc || c.nhwc) && shape.size() == 4) {
    ASSIGN_OR_RETURN(std::optional<Val> a4, AsNhwc(n, a));
    ASSIGN_OR_RETURN(std::optional<Val> c4, AsNhwc(n, c));
    if (a4 && c4) {
      if (op == "Add" && a4->shape == c4->shape) return Val{b_->Add("AddN", Hint(n), {a4->tensor, c4->tensor}), shape, true};
      return Val{b_->Add(ours, Hint(n), {a4->tensor, c4->tensor}), shape, true};
    }
  }
  ASSIGN_OR_RETURN(a, Nchw(a, Hint(n, "/a")));
  ASSIGN_OR_RETURN(c, Nchw(c, Hint(n, "/b")));
  if (op == "Add") {
    if (a.shape == c.shape) return Val{b_->Add("AddN", Hint(n), {a.tensor, c.tensor}), a.shape, false};
    auto bias_of = [](const Val& x, const Val& b) {
      Shape s = b.shape;
      while (s.size() > 1 && s[0] == 1) s.erase(s.begin());
      return s.size() == 1 && !x.shape.empty() && b.shape.size() <= x.shape.size() && s[0] == x.shape.back() && s[0] >= 0;
    };
    for (int swap = 0; swap < 2; ++swap, std::swap(a, c)) {
      if (!bias_of(a, c)) continue;
      std::string bias = c.tensor;
      if (c.shape.size() != 1) bias = b_->Add("Reshape", Hint(n, "/bias"), {bias}, {{"shape", AttrInts({a.shape.back()})}});
      return Val{b_->Add("BiasAdd", Hint(n), {a.tensor, bias}), a.shape, false};
    }
  }
  return Val{b_->Add(ours, Hint(n), {a.tensor, c.tensor}), shape, false};
}

// ReduceMean / ReduceSum: axes as an attribute (before opsets 13 and 18)
// or a constant input (since), keepdims, noop_with_empty_axes.
absl::Status Importer::Reduction(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"axes", "keepdims", "noop_with_empty_axes"}));
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, Ints(n, "axes", {}));
  if (Attr(n, "axes") == nullptr && HasInput(n, 1)) {
    ASSIGN_OR_RETURN(Tensor t, Static(n, 1));
    if (t.dtype() != DT_INT64 || t.shape().rank() != 1 || t.NumElements() > kMaxRank) {
      return Bad(n, "axes must be a 1-D int64 constant");
    }
    axes.assign(t.data<int64_t>(), t.data<int64_t>() + t.NumElements());
  }
  ASSIGN_OR_RETURN(int64_t keepdims, Int(n, "keepdims", 1));
  ASSIGN_OR_RETURN(int64_t noop, Int(n, "noop_with_empty_axes", 0));
  if (axes.empty() && noop != 0) {
    Set(n, 0, x);
    return absl::OkStatus();
  }
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) {
    const int64_t k = a < 0 ? a + rank : a;
    if (k < 0 || k >= rank || reduced[k]) return Bad(n, absl::StrCat("axis ", a, " is out of range or repeated for ", ShapeString(x.shape)));
    reduced[k] = true;
  }
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i]) {
      out.push_back(x.shape[i]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  // Reduced in NHWC where the kept axes stay in NCHW's order there: always
  // with keepdims, otherwise unless channels and a spatial axis both stay.
  if (x.nhwc && !keepdims && !reduced[1] && (!reduced[2] || !reduced[3])) {
    ASSIGN_OR_RETURN(x, Nchw(x, Hint(n)));
  }
  std::vector<int64_t> ours;
  for (int64_t i = 0; i < rank; ++i) {
    if (reduced[i]) ours.push_back(x.nhwc ? std::vector<int64_t>{0, 3, 1, 2}[i] : i);
  }
  std::sort(ours.begin(), ours.end());
  const bool nhwc = x.nhwc && keepdims;
  Set(n, 0, Val{b_->Add(n.op_type(), Hint(n), {x.tensor}, {{"axes", AttrInts(ours)}, {"keep_dims", AttrB(keepdims != 0)}}),
                out, nhwc});
  return absl::OkStatus();
}

// Clip: bounds as attributes (before opset 11) or constant inputs (since);
// ReLU6 is Clip(0, 6).
absl::Status Importer::ClipNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"min", "max"}));
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  Attrs attrs;
  for (int i = 1; i <= 2; ++i) {
    const char* name = i == 1 ? "min" : "max";
    float v;
    if (Attr(n, name) != nullptr) {
      ASSIGN_OR_RETURN(v, Float(n, name, 0));
    } else if (HasInput(n, i)) {
      ASSIGN_OR_RETURN(Tensor t, Static(n, i));
      if (t.dtype() != DT_FLOAT || t.NumElements() != 1) return Unsupported(n, absl::StrCat(name, " must be a float scalar"));
      v = t.data<float>()[0];
    } else {
      continue;
    }
    if (std::isnan(v)) return Bad(n, absl::StrCat(name, " is NaN"));
    attrs[name] = AttrF(v);
  }
  if (attrs.count("min") && attrs.count("max") && attrs["min"].f() > attrs["max"].f()) {
    return Bad(n, absl::StrCat("min ", attrs["min"].f(), " is above max ", attrs["max"].f()));
  }
  Set(n, 0, Val{b_->Add("Clip", Hint(n), {x.tensor}, attrs), x.shape, x.nhwc});
  return absl::OkStatus();
}

// BatchNormalization (docs/models.md, "Batch normalisation"): scale and B
// are trained variables; the file's running mean and variance (initializers)
// become two moving-average variables (VariableDef.moving_average, with the
// node's momentum), which the kernel normalises with in evaluation, a
// training step normalising with the batch's statistics. The step reports
// the batch's mean and unbiased variance for them (moving_statistics), and
// the store folds those into the moving values after the step. A graph
// reading the node's running-statistics outputs is refused: the update is
// the store's, after the step, and no node of the step can see it.
absl::Status Importer::BatchNormNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"epsilon", "momentum", "training_mode", "spatial"}));
  ASSIGN_OR_RETURN(float eps, Float(n, "epsilon", 1e-5f));
  if (!(eps > 0 && eps < 1)) return Bad(n, absl::StrCat("epsilon ", eps, " is not in (0, 1)"));
  ASSIGN_OR_RETURN(float momentum, Float(n, "momentum", 0.9f));
  if (!(momentum >= 0 && momentum <= 1)) return Bad(n, absl::StrCat("momentum ", momentum, " is not in [0, 1]"));
  ASSIGN_OR_RETURN(int64_t spatial, Int(n, "spatial", 1));
  if (spatial != 1) return Unsupported(n, "spatial 0 (statistics per position) is not supported");
  if (!HasInput(n, 3) || !HasInput(n, 4)) return Bad(n, "needs 5 inputs (X, scale, B, input_mean, input_var)");
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty() && consumed_mask_.count(n.output(k))) {
      return Unsupported(n, absl::StrCat("output ", k, " (the updated running statistics) is read; psrt updates the ",
                                         "moving statistics in its store after the step, where no node can read them"));
    }
  }
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  if (x.shape.size() != 2 && x.shape.size() != 4) {
    return Unsupported(n, absl::StrCat("input ", ShapeString(x.shape), ": only [N, C] and [N, C, H, W] are supported"));
  }
  const int64_t ch = x.shape[1];
  if (ch < 1) return Unsupported(n, absl::StrCat("input ", ShapeString(x.shape), " has an unknown channel count"));
  ASSIGN_OR_RETURN(Val scale, In(n, 1, /*weight=*/true));
  ASSIGN_OR_RETURN(Val bias, In(n, 2, /*weight=*/true));
  for (const Val* v : {&scale, &bias}) {
    if (v->shape != Shape{ch}) return Bad(n, absl::StrCat(v == &scale ? "scale " : "B ", ShapeString(v->shape), " is not [", ch, "]"));
  }
  Val moving[2];
  for (int i = 0; i < 2; ++i) {
    const std::string& name = n.input(3 + i);
    const char* what = i == 0 ? "input_mean" : "input_var";
    auto init = initializers_.find(name);
    if (init == initializers_.end() || values_.count(name) || constants_.count(name)) {
      return Unsupported(n, absl::StrCat(what, " (\"", name, "\") must be an initializer of its own (it becomes ",
                                         "the node's moving statistic)"));
    }
    ASSIGN_OR_RETURN(Tensor t, OnnxTensor(*init->second, absl::StrCat(Where(n), ": initializer \"", name, "\"")));
    if (t.dtype() != DT_FLOAT || t.shape().dims() != Shape{ch}) {
      return Bad(n, absl::StrCat(what, " ", DataTypeName(t.dtype()), t.shape().ToString(), " is not float [", ch, "]"));
    }
    ASSIGN_OR_RETURN(moving[i], NewVariable(name, t, VariableDef::DENSE));
    result_.variables.back().mutable_moving_average()->set_momentum(momentum);
    values_[name] = moving[i];
  }
  if (x.shape.size() == 4) {
    ASSIGN_OR_RETURN(x, Nhwc(n, x));  // channels last, as the kernel normalises
  }
  const std::string bn = b_->Add("BatchNorm", Hint(n), {x.tensor, scale.tensor, bias.tensor, moving[0].tensor, moving[1].tensor},
                                 {{"epsilon", AttrF(eps)}});
  // What the step reports for each moving variable: the batch's mean and
  // its unbiased variance (PyTorch's running_var takes var * n / (n - 1)).
  result_.moving_statistics[moving[0].tensor] = TensorName(bn, 1);
  result_.moving_statistics[moving[1].tensor] = TensorName(bn, 3);
  Set(n, 0, Val{bn, x.shape, x.nhwc});
  return absl::OkStatus();
}

// Pad, constant mode with zeros on the spatial axes of an NCHW value,
// becomes the padding of the Convs that read it (a convolution over zeros
// it pads itself is the same sum): no padded copy of the input, nor of its
// gradient, is made per step, and no kernel is needed. A Pad read by
// anything else, or of another mode or value, is refused.
absl::Status Importer::PadNode(const Node& n) {
  RETURN_IF_ERROR(OnlyAttrs(n, {"mode", "pads", "value"}));
  ASSIGN_OR_RETURN(std::string mode, String(n, "mode", "constant"));
  if (mode != "constant") return Unsupported(n, absl::StrCat("mode ", mode, " is not supported (only constant)"));
  ASSIGN_OR_RETURN(Val x, In(n, 0));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> pads;
  float value = 0;
  std::vector<int64_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  auto known_ints = [&](int i, const char* what) -> absl::StatusOr<std::vector<int64_t>> {
    std::optional<Folded> k = Known(n, i);
    if (!k || k->symbolic() || k->value.dtype() != DT_INT64 || k->value.shape().rank() != 1 ||
        k->value.NumElements() > 2 * kMaxRank) {
      return Unsupported(n, absl::StrCat(what, " must be a constant int64 vector"));
    }
    return std::vector<int64_t>(k->value.data<int64_t>(), k->value.data<int64_t>() + k->value.NumElements());
  };
  if (opset_ < 11) {
    ASSIGN_OR_RETURN(pads, Ints(n, "pads", {}));
    ASSIGN_OR_RETURN(value, Float(n, "value", 0.0f));
  } else {
    if (Attr(n, "pads") != nullptr || Attr(n, "value") != nullptr) return Bad(n, "pads and value are inputs since opset 11");
    ASSIGN_OR_RETURN(pads, known_ints(1, "pads"));
    if (HasInput(n, 2)) {
      ASSIGN_OR_RETURN(Tensor v, Static(n, 2));
      if (v.NumElements() != 1) return Unsupported(n, "constant_value must be a scalar");
      value = v.dtype() == DT_FLOAT ? v.data<float>()[0] : static_cast<float>(v.data<int64_t>()[0]);
    }
    if (HasInput(n, 3)) {
      ASSIGN_OR_RETURN(axes, known_ints(3, "axes"));
      std::vector<bool> seen(rank, false);
      for (int64_t& a : axes) {
        if (a < 0) a += rank;
        if (a < 0 || a >= rank || seen[a]) return Bad(n, absl::StrCat("axis out of range or repeated for ", ShapeString(x.shape)));
        seen[a] = true;
      }
    }
  }
  if (pads.size() != 2 * axes.size()) {
    return Bad(n, absl::StrCat(pads.size(), " pads for ", axes.size(), " axes (needs a begin and an end for each)"));
  }
  std::vector<int64_t> begin(rank, 0), end(rank, 0);
  for (size_t j = 0; j < axes.size(); ++j) {
    begin[axes[j]] = pads[j];
    end[axes[j]] = pads[j + axes.size()];
  }
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
    Set(n, 0, x);
    return absl::OkStatus();
  }
  if (value != 0) return Unsupported(n, absl::StrCat("constant_value ", value, " is not supported (only 0)"));
  if (rank != 4 || begin[0] || end[0] || begin[1] || end[1]) {
    return Unsupported(n, absl::StrCat("pads [", absl::StrJoin(pads, ","), "] of ", ShapeString(x.shape),
                                       ": only the two spatial axes of an NCHW value may be padded"));
  }
  constexpr int64_t kMaxPad = 1024;  // as a window's pads
  Shape shape = x.shape;
  for (int64_t a = 2; a < 4; ++a) {
    if (begin[a] < 0 || end[a] < 0 || begin[a] > kMaxPad || end[a] > kMaxPad) {
      return Unsupported(n, absl::StrCat("pads [", absl::StrJoin(pads, ","), "]: each must be in [0, ", kMaxPad,
                                         "] (cropping is not supported)"));
    }
    if (shape[a] < 0) return Unsupported(n, absl::StrCat("input ", ShapeString(x.shape), " has unknown spatial dims"));
    shape[a] += begin[a] + end[a];
  }
  for (const std::string& o : options_.outputs) {
    if (o == n.output(0)) return Unsupported(n, "is the model's output; a Pad is only supported before a Conv");
  }
  for (const Node* r : readers_[n.output(0)]) {
    const bool as_data_only = r->op_type() == "Conv" && r->input_size() > 0 && r->input(0) == n.output(0) &&
                              std::count(r->input().begin(), r->input().end(), n.output(0)) == 1;
    if (!as_data_only) {
      return Unsupported(n, absl::StrCat("read by ", Where(*r), "; a Pad is only supported where every reader is a Conv ",
                                         "taking it as its input X (it becomes the Conv's padding)"));
    }
  }
  conv_pads_[n.output(0)] = {begin[2], begin[3], end[2], end[3]};
  Set(n, 0, Val{x.tensor, shape, x.nhwc});
  return absl::OkStatus();
}

absl::Status Importer::Convert(const Node& n) {
  const std::string& op = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx") {
    return Unsupported(n, absl::StrCat("domain \"", n.domain(), "\" is not supported (only ai.onnx)"));
  }
  if (n.output_size() < 1 || n.output(0).empty()) return Bad(n, "has no output");
  ASSIGN_OR_RETURN(bool folded, Fold(n));
  if (folded) return absl::OkStatus();
  if (op == "Shape") return ShapeNode(n);
  if (op == "Transpose") return TransposeNode(n);
  if (op == "Concat") return ConcatNode(n);
  if (op == "Gather") return GatherNode(n);
  if (op == "Slice") return SliceNode(n);
  if (op == "Squeeze" || op == "Unsqueeze") return SqueezeNode(n);
  if (op == "Expand") return ExpandNode(n);
  if (op == "ConstantOfShape") return ConstantOfShapeNode(n);
  if (op == "LayerNormalization") return LayerNormNode(n);
  if (op == "Erf" || op == "Sqrt" || op == "Pow" || op == "Gelu") return MathNode(n);
  if (op == "Cast" || op == "CastLike") return CastNode(n);
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "Identity") {
    RETURN_IF_ERROR(OnlyAttrs(n, {}));
    ASSIGN_OR_RETURN(Val x, In(n, 0));
    Set(n, 0, Val{b_->Add(op, Hint(n), {x.tensor}), x.shape, x.nhwc});
    return absl::OkStatus();
  }
  if (op == "Dropout") {
    RETURN_IF_ERROR(OnlyAttrs(n, {"seed", "ratio"}));
    ASSIGN_OR_RETURN(Val x, In(n, 0));
    float rate = 0.5f;
    if (opset_ < 12) {
      ASSIGN_OR_RETURN(rate, Float(n, "ratio", 0.5f));
    } else if (HasInput(n, 1)) {
      ASSIGN_OR_RETURN(Tensor r, Static(n, 1));
      if (r.dtype() != DT_FLOAT || r.NumElements() != 1) return Unsupported(n, "ratio must be a float scalar");
      rate = r.data<float>()[0];
    }
    if (!(rate >= 0 && rate < 1)) return Bad(n, absl::StrCat("ratio ", rate, " is not in [0, 1)"));
    if (n.output_size() > 1 && !n.output(1).empty() && consumed_mask_.count(n.output(1))) {
      return Unsupported(n, "the mask output is not supported");
    }
    // Our Dropout drops in training steps and passes through in evaluation.
    Set(n, 0, Val{rate == 0 ? x.tensor : b_->Add("Dropout", Hint(n), {x.tensor}, {{"rate", AttrF(rate)}}), x.shape, x.nhwc});
    return absl::OkStatus();
  }
  if (op == "Softmax" || op == "LogSoftmax") return SoftmaxNode(n);
  if (op == "MatMul") {
    ASSIGN_OR_RETURN(Val a, In(n, 0, true));
    ASSIGN_OR_RETURN(Val bm, In(n, 1, true));
    if (a.shape.size() != 2 || bm.shape.size() != 2) return MatMulNode(n);
  }
  if (op == "Gemm" || op == "MatMul") {
    RETURN_IF_ERROR(OnlyAttrs(n, op == "Gemm" ? std::set<std::string>{"transA", "transB", "alpha", "beta"} : std::set<std::string>{}));
    ASSIGN_OR_RETURN(Val a, In(n, 0, true));
    ASSIGN_OR_RETURN(Val bm, In(n, 1, true));
    ASSIGN_OR_RETURN(a, Nchw(a, Hint(n)));
    ASSIGN_OR_RETURN(bm, Nchw(bm, Hint(n)));
    if (a.shape.size() != 2 || bm.shape.size() != 2) {
      return Unsupported(n, absl::StrCat("inputs ", ShapeString(a.shape), " and ", ShapeString(bm.shape),
                                         ": only 2-D matrix products are supported yet"));
    }
    ASSIGN_OR_RETURN(int64_t ta, Int(n, "transA", 0));
    ASSIGN_OR_RETURN(int64_t tb, Int(n, "transB", 0));
    ASSIGN_OR_RETURN(float alpha, Float(n, "alpha", 1.0f));
    ASSIGN_OR_RETURN(float beta, Float(n, "beta", 1.0f));
    if (alpha != 1.0f || beta != 1.0f) return Unsupported(n, "alpha and beta other than 1 are not supported");
    const int64_t m = a.shape[ta ? 1 : 0], k = a.shape[ta ? 0 : 1], k2 = bm.shape[tb ? 1 : 0], cols = bm.shape[tb ? 0 : 1];
    if (!DimsAgree(k, k2)) return Bad(n, absl::StrCat("inner dimensions differ: ", ShapeString(a.shape), " x ", ShapeString(bm.shape)));
    Attrs attrs;
    if (ta) attrs["transpose_a"] = AttrB(true);
    if (tb) attrs["transpose_b"] = AttrB(true);
    Val y{b_->Add("MatMul", Hint(n, op == "Gemm" ? "/matmul" : ""), {a.tensor, bm.tensor}, attrs), {m, cols}, false};
    if (op == "Gemm" && HasInput(n, 2)) {
      ASSIGN_OR_RETURN(Val c, In(n, 2, true));
      ASSIGN_OR_RETURN(y, Arithmetic(n, "Add", y, c));
    }
    Set(n, 0, y);
    return absl::OkStatus();
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    // An initializer here is a trained parameter (a bias, a scale):
    // PyTorch writes literal constants as Constant nodes.
    RETURN_IF_ERROR(OnlyAttrs(n, {}));
    if (std::optional<int> x = GeluInputOf(n)) {
      ASSIGN_OR_RETURN(Val v, In(n, *x));
      Set(n, 0, Val{b_->Add("Gelu", Hint(n), {v.tensor}), v.shape, v.nhwc});
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(Val a, In(n, 0, true));
    ASSIGN_OR_RETURN(Val c, In(n, 1, true));
    ASSIGN_OR_RETURN(Val y, Arithmetic(n, op, a, c));
    Set(n, 0, y);
    return absl::OkStatus();
  }
  if (op == "ReduceMean" || op == "ReduceSum") return Reduction(n);
  if (op == "Clip") return ClipNode(n);
  if (op == "BatchNormalization") return BatchNormNode(n);
  if (op == "Pad") return PadNode(n);
  if (op == "GlobalAveragePool") {
    RETURN_IF_ERROR(OnlyAttrs(n, {}));
    ASSIGN_OR_RETURN(Val x, In(n, 0));
    if (x.shape.size() != 4) return Unsupported(n, absl::StrCat("input ", ShapeString(x.shape), " is not 4-D NCHW"));
    ASSIGN_OR_RETURN(x, Nhwc(n, x));
    Set(n, 0, Val{b_->Add("ReduceMean", Hint(n), {x.tensor}, {{"axes", AttrInts({1, 2})}, {"keep_dims", AttrB(true)}}),
                  {x.shape[0], x.shape[1], 1, 1}, true});
    return absl::OkStatus();
  }
  if (op == "Flatten") {
    RETURN_IF_ERROR(OnlyAttrs(n, {"axis"}));
    ASSIGN_OR_RETURN(Val x, In(n, 0));
    ASSIGN_OR_RETURN(int64_t axis, Int(n, "axis", 1));
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (axis < 0) axis += rank;
    if (axis != 1) return Unsupported(n, absl::StrCat("axis ", axis, "; only axis 1 (keep the batch) is supported"));
    ASSIGN_OR_RETURN(Val y, Reshaped(n, x, {0, -1}));
    Set(n, 0, y);
    return absl::OkStatus();
  }
  if (op == "Reshape") {
    RETURN_IF_ERROR(OnlyAttrs(n, {"allowzero"}));
    ASSIGN_OR_RETURN(Val x, In(n, 0, /*weight=*/true));
    std::optional<Folded> shape = Known(n, 1);
    if (!shape) return Unsupported(n, "the shape must be known at import time (a constant or arithmetic on an input's Shape)");
    if (shape->value.dtype() != DT_INT64 || shape->value.shape().rank() != 1 || shape->value.NumElements() > kMaxRank) {
      return Bad(n, "shape must be a 1-D int64 vector");
    }
    ASSIGN_OR_RETURN(int64_t allowzero, Int(n, "allowzero", 0));
    std::vector<int64_t> target(shape->value.data<int64_t>(), shape->value.data<int64_t>() + shape->value.NumElements());
    ASSIGN_OR_RETURN(Val y, Reshaped(n, x, target, shape->batch, allowzero != 0));
    Set(n, 0, y);
    return absl::OkStatus();
  }
  if (op == "Constant") {
    if (n.attribute_size() != 1) return Bad(n, "needs exactly one attribute");
    const onnx::AttributeProto& a = n.attribute(0);
    Tensor t;
    if (a.name() == "value") {
      ASSIGN_OR_RETURN(t, OnnxTensor(a.t(), Where(n)));
    } else if (a.name() == "value_float") {
      t = Tensor::Scalar<float>(a.f());
    } else if (a.name() == "value_int") {
      t = Tensor::Scalar<int64_t>(a.i());
    } else if (a.name() == "value_floats" || a.name() == "value_ints") {
      if (a.floats_size() > kMaxElements || a.ints_size() > kMaxElements) return Bad(n, "too many values");
      t = a.name() == "value_floats"
              ? Tensor::FromVector<float>({a.floats().begin(), a.floats().end()}, TensorShape({a.floats_size()}))
              : Tensor::FromVector<int64_t>({a.ints().begin(), a.ints().end()}, TensorShape({a.ints_size()}));
    } else {
      return Unsupported(n, absl::StrCat("attribute ", a.name(), " is not supported"));
    }
    constants_[n.output(0)] = Folded{t, {}};
    return absl::OkStatus();
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    ASSIGN_OR_RETURN(Val y, Window(n, op));
    Set(n, 0, y);
    return absl::OkStatus();
  }
  return Unsupported(n, absl::StrCat("op ", op, " is not supported (supported: ", absl::StrJoin(SupportedOnnxOps(), ", "), ")"));
}

}  // namespace onnx_internal


std::vector<std::string> SupportedOnnxOps() {
  return {"Add",       "AveragePool", "BatchNormalization", "Cast",      "CastLike",  "Clip",      "Concat",
          "Constant",  "ConstantOfShape", "Conv",           "Div",       "Dropout",   "Erf",       "Expand",
          "Flatten",   "Gather",      "Gelu",               "Gemm",      "GlobalAveragePool", "Identity",
          "LayerNormalization", "LogSoftmax", "MatMul",     "MaxPool",   "Mul",       "Pad",       "Pow",       "ReduceMean",
          "ReduceSum", "Relu",        "Reshape",            "Shape",     "Sigmoid",   "Slice",     "Softmax",
          "Sqrt",      "Squeeze",     "Sub",                "Tanh",      "Transpose", "Unsqueeze"};
}

absl::StatusOr<onnx::ModelProto> ReadOnnxModel(const std::string& path, int64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("cannot open ONNX file ", path));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("ONNX file ", path, " is not a regular file"));
  if (st.st_size > max_bytes || st.st_size > INT32_MAX) {
    return absl::ResourceExhaustedError(absl::StrCat("ONNX file ", path, " is ", st.st_size, " bytes, more than the ",
                                                     max_bytes, " allowed"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ONNX file ", path));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) {
    return absl::DataLossError(absl::StrCat("ONNX file ", path, ": short read"));
  }
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  stream.SetTotalBytesLimit(static_cast<int>(bytes.size()));
  onnx::ModelProto model;
  if (!model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(absl::StrCat("ONNX file ", path, " does not parse as an ONNX model (truncated or not ONNX)"));
  }
  if (!model.has_graph()) return absl::InvalidArgumentError(absl::StrCat("ONNX file ", path, " has no graph"));
  return model;
}

namespace onnx_internal {

absl::StatusOr<OnnxImport> Importer::Run() {
  for (const auto& o : model_.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
  }
  if (opset_ < 7) return absl::UnimplementedError(absl::StrCat("ONNX model: opset ", opset_, " (7 or later is supported; PyTorch writes 13+)"));
  for (int i = 0; i < graph_.node_size(); ++i) {
    const Node& n = graph_.node(i);
    index_[&n] = i;
    for (const std::string& out : n.output()) {
      if (out.empty()) continue;
      if (!producer_.emplace(out, &n).second) return Bad(n, absl::StrCat("output \"", out, "\" is produced twice"));
    }
  }
  for (const auto& t : graph_.initializer()) {
    if (!initializers_.emplace(t.name(), &t).second) {
      return absl::InvalidArgumentError(absl::StrCat("ONNX initializer \"", t.name(), "\" appears twice"));
    }
  }
  std::set<std::string> graph_inputs;
  for (const auto& in : graph_.input()) graph_inputs.insert(in.name());
  for (const auto& [name, feed] : options_.inputs) {
    if (!graph_inputs.count(name)) return absl::InvalidArgumentError(absl::StrCat("ONNX model has no graph input \"", name, "\""));
  }
  // The nodes the outputs need.
  std::set<const Node*> needed;
  std::deque<std::string> todo;
  for (const std::string& o : options_.outputs) {
    if (!producer_.count(o)) {
      std::vector<std::string> outs;
      for (const auto& v : graph_.output()) outs.push_back(v.name());
      return absl::InvalidArgumentError(absl::StrCat("ONNX model: output \"", o, "\" is no node's output (graph outputs: ",
                                                     absl::StrJoin(outs, ", "), ")"));
    }
    todo.push_back(o);
    consumed_mask_.insert(o);
  }
  while (!todo.empty()) {
    auto it = producer_.find(todo.front());
    todo.pop_front();
    if (it == producer_.end() || !needed.insert(it->second).second) continue;
    for (const std::string& in : it->second->input()) {
      if (in.empty()) continue;
      readers_[in].push_back(it->second);
      consumed_mask_.insert(in);
      todo.push_back(in);
    }
  }
  for (const auto& in : graph_.input()) {
    if (!consumed_mask_.count(in.name()) || initializers_.count(in.name())) continue;
    auto feed = options_.inputs.find(in.name());
    if (feed == options_.inputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("ONNX graph input \"", in.name(),
                                                     "\" is needed but no input feature feeds it (model.onnx.input)"));
    }
    RETURN_IF_ERROR(Bind(in, feed->second));
    if (batch_ref_.empty()) batch_ref_ = feed->second.tensor;
  }
  for (int i = 0; i < graph_.node_size(); ++i) {
    if (needed.count(&graph_.node(i))) RETURN_IF_ERROR(Convert(graph_.node(i)));
  }
  for (const std::string& o : options_.outputs) {
    auto v = values_.find(o);
    if (v == values_.end()) return absl::UnimplementedError(absl::StrCat("ONNX output \"", o, "\" is a constant"));
    ASSIGN_OR_RETURN(Val out, Nchw(v->second, Sanitize(o)));
    result_.outputs[o] = out.tensor;
    result_.output_shapes[o] = out.shape;
  }
  return std::move(result_);
}

}  // namespace onnx_internal

absl::StatusOr<OnnxImport> ImportOnnx(const onnx::ModelProto& model, const OnnxImportOptions& options,
                                      GraphBuilder* builder) {
  return onnx_internal::Importer(model, options, builder).Run();
}

}  // namespace psrt