// The ONNX importer's internals, shared by its source files
// (onnx_import.cc: the driver, inputs, convolutions, arithmetic;
// onnx_import_tensor.cc: values known at import time, shape arithmetic,
// reshaping and the sequence-model ops). Not an API: use onnx_import.h.
#ifndef PSRT_COMMON_GRAPH_ONNX_IMPORTER_H_
#define PSRT_COMMON_GRAPH_ONNX_IMPORTER_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph/onnx_import.h"

namespace psrt {
namespace onnx_internal {

// No tensor of a model may hold more (a hostile file's dims are checked
// against its bytes too; this bounds what a shape alone can claim).
constexpr int64_t kMaxElements = int64_t{1} << 31;

// A value of the ONNX graph as our graph holds it. `shape` is ONNX's
// (logical) shape, where a negative dim -k stands for k times the batch
// size (unknown until run time: -1 is the batch itself, -4 the batch times
// 4 heads of an attention reshape); with `nhwc` the tensor holds that 4-D
// NCHW value transposed to NHWC.
struct Val {
  std::string tensor;
  Shape shape;
  bool nhwc = false;
  bool ids = false;  // an integer graph input: only a Gather reads it (EmbeddingNode)
};

inline int64_t Product(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < std::min(to, s.size()); ++i) {
    if (s[i] < 0) return -1;
    p *= s[i];  // every dim is checked <= kMaxElements and products below
  }
  return p;
}

// Checks dims from a file: non-negative (or -1 where `unknown_ok`) and an
// element count of at most kMaxElements.
absl::Status CheckDims(const Shape& s, bool unknown_ok, const std::string& what);


// Our node names: ONNX names may hold ':' (PyTorch's "onnx::Gemm_12"),
// which our tensor names use for output indices.
// A value known at import time: a Constant's, a non-float initializer's,
// or one folded from them and from Shape (the shape arithmetic exporters
// write around reshapes). An element of an int64 value may stand for a
// multiple of the batch size: batch[i] = k > 0 means element i is k times
// the batch (its `value` element is then meaningless).
struct Folded {
  Tensor value;
  std::vector<int64_t> batch;  // empty, or one per element
  bool symbolic() const {
    return std::any_of(batch.begin(), batch.end(), [](int64_t k) { return k != 0; });
  }
};

inline std::string Sanitize(const std::string& name) {
  std::string s = name.empty() ? "onnx" : name;
  for (char& c : s) {
    if (c == ':' || c == '^' || static_cast<unsigned char>(c) < 0x20) c = '_';
  }
  return s;
}


// NumPy broadcasting of ONNX shapes (a negative dim: that multiple of the
// batch); false where two known dims differ and neither is 1.
bool BroadcastOnnx(const Shape& a, const Shape& b, Shape* out);

class Importer {
 public:
  Importer(const onnx::ModelProto& model, const OnnxImportOptions& options, GraphBuilder* b)
      : model_(model), graph_(model.graph()), options_(options), b_(b) {}

  absl::StatusOr<OnnxImport> Run();

 private:
  using Node = onnx::NodeProto;

  // "ONNX node NAME (OP)" or "ONNX node #INDEX (OP)"; a file's strings
  // are cut to a readable length.
  std::string Where(const Node& n) const {
    auto cut = [](const std::string& s) { return s.size() <= 200 ? s : s.substr(0, 200) + "..."; };
    return absl::StrCat("ONNX node ", n.name().empty() ? absl::StrCat("#", index_.at(&n)) : cut(n.name()), " (",
                        cut(n.op_type()), ")");
  }
  absl::Status Bad(const Node& n, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(Where(n), ": ", what));
  }
  absl::Status Unsupported(const Node& n, absl::string_view what) const {
    return absl::UnimplementedError(absl::StrCat(Where(n), ": ", what));
  }
  std::string Hint(const Node& n, const std::string& suffix = "") const {
    return Sanitize(n.name().empty() ? n.output_size() > 0 ? n.output(0) : n.op_type() : n.name()) + suffix;
  }

  // Attributes, checked against their declared type.
  const onnx::AttributeProto* Attr(const Node& n, const std::string& name) const {
    for (const auto& a : n.attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  absl::StatusOr<int64_t> Int(const Node& n, const std::string& name, int64_t fallback) const {
    const auto* a = Attr(n, name);
    if (a == nullptr) return fallback;
    if (a->has_type() && a->type() != onnx::AttributeProto::INT) return Bad(n, absl::StrCat("attribute ", name, " is not an int"));
    return a->i();
  }
  absl::StatusOr<float> Float(const Node& n, const std::string& name, float fallback) const {
    const auto* a = Attr(n, name);
    if (a == nullptr) return fallback;
    if (a->has_type() && a->type() != onnx::AttributeProto::FLOAT) return Bad(n, absl::StrCat("attribute ", name, " is not a float"));
    return a->f();
  }
  absl::StatusOr<std::vector<int64_t>> Ints(const Node& n, const std::string& name, std::vector<int64_t> fallback) const {
    const auto* a = Attr(n, name);
    if (a == nullptr) return fallback;
    if (a->has_type() && a->type() != onnx::AttributeProto::INTS) return Bad(n, absl::StrCat("attribute ", name, " is not a list of ints"));
    if (a->ints_size() > kMaxRank) return Bad(n, absl::StrCat("attribute ", name, " has ", a->ints_size(), " values"));
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }
  absl::StatusOr<std::string> String(const Node& n, const std::string& name, const std::string& fallback) const {
    const auto* a = Attr(n, name);
    if (a == nullptr) return fallback;
    if (a->has_type() && a->type() != onnx::AttributeProto::STRING) return Bad(n, absl::StrCat("attribute ", name, " is not a string"));
    return a->s();
  }
  // Refuses attributes the converter does not read.
  absl::Status OnlyAttrs(const Node& n, const std::set<std::string>& known) const {
    for (const auto& a : n.attribute()) {
      if (!known.count(a.name())) return Unsupported(n, absl::StrCat("attribute ", a.name(), " is not supported"));
    }
    return absl::OkStatus();
  }

  bool HasInput(const Node& n, int i) const { return i < n.input_size() && !n.input(i).empty(); }
  // Input i as a tensor of our graph. `weight`: a float initializer there
  // becomes a variable (it is trained); elsewhere a constant.
  absl::StatusOr<Val> In(const Node& n, int i, bool weight = false);
  // Input i's value, known at import time (an initializer or Constant).
  absl::StatusOr<Tensor> Static(const Node& n, int i);
  absl::StatusOr<Val> Nchw(Val v, const std::string& hint);
  absl::StatusOr<Val> Nhwc(const Node& n, Val v);
  absl::Status Bind(const onnx::ValueInfoProto& input, const OnnxFeed& feed);
  absl::Status Convert(const Node& n);
  absl::StatusOr<Val> Window(const Node& n, const std::string& op);
  // x reshaped to `target` (ONNX's Reshape: 0 copies a dim unless
  // allowzero, -1 is inferred), where target_batch[i] = k > 0 makes dim i
  // k times the batch.
  absl::StatusOr<Val> Reshaped(const Node& n, const Val& x, std::vector<int64_t> target,
                               std::vector<int64_t> target_batch = {}, bool allowzero = false);
  // x reshaped to `shape` (negative dims: batch multiples, as Val's).
  absl::StatusOr<Val> ReshapedTo(const Node& n, const Val& x, const Shape& shape);
  // Input i, a shape vector known at import time, as a Val's shape.
  absl::StatusOr<Shape> ShapeInput(const Node& n, int i);
  // Input i's value when it is known at import time (a Constant, a
  // non-float initializer, a folded value); null otherwise.
  std::optional<Folded> Known(const Node& n, int i) const;
  // Computes a node whose inputs are all known (shape arithmetic) at import
  // time: true when it did.
  absl::StatusOr<bool> Fold(const Node& n);
  absl::StatusOr<Folded> FoldOp(const Node& n, const std::vector<Folded>& in);
  // The converters of onnx_import_tensor.cc.
  absl::Status ShapeNode(const Node& n);
  absl::Status TransposeNode(const Node& n);
  absl::Status ConcatNode(const Node& n);
  absl::Status GatherNode(const Node& n);
  // Gather of `ids` (an integer graph input) from a float initializer
  // [rows, dim] along axis 0: an EmbeddingLookup.
  absl::Status EmbeddingNode(const Node& n, const Val& ids);
  // A float initializer as a new variable of `kind` ([rows, ...]): a
  // table's Variable node has shape [-1, ...] (the batch's rows).
  absl::StatusOr<Val> NewVariable(const std::string& name, const Tensor& t, VariableDef::Kind kind);
  absl::Status SliceNode(const Node& n);
  absl::Status SqueezeNode(const Node& n);
  absl::Status ExpandNode(const Node& n);
  absl::Status ConstantOfShapeNode(const Node& n);
  absl::Status LayerNormNode(const Node& n);
  absl::Status MatMulNode(const Node& n);
  absl::Status SoftmaxNode(const Node& n);
  absl::Status MathNode(const Node& n);
  absl::Status CastNode(const Node& n);
  // Which input of Mul node n is x where n computes the exact GELU of x as
  // PyTorch writes it, x * (0.5 * (erf(x / sqrt 2) + 1)); null otherwise.
  // (One fused op instead of five and their gradients: a tenth of a
  // transformer's step.)
  std::optional<int> GeluInputOf(const Node& n) const;
  // The axes of Squeeze/Unsqueeze/ReduceX: the attribute (older opsets) or
  // the constant input 1 (newer); normalised against `rank`.
  absl::StatusOr<std::vector<int64_t>> AxesOf(const Node& n, int64_t rank, bool required);
  absl::StatusOr<Val> Arithmetic(const Node& n, const std::string& op, Val a, Val c);
  absl::StatusOr<std::optional<Val>> AsNhwc(const Node& n, Val v);
  absl::Status Reduction(const Node& n);
  absl::Status ClipNode(const Node& n);
  absl::Status BatchNormNode(const Node& n);
  // Pad with zeros before the Convs it feeds: their own padding.
  absl::Status PadNode(const Node& n);
  void Set(const Node& n, int k, Val v) { values_[n.output(k)] = std::move(v); }

  const onnx::ModelProto& model_;
  const onnx::GraphProto& graph_;
  const OnnxImportOptions& options_;
  GraphBuilder* const b_;
  int64_t opset_ = 0;
  std::map<const Node*, int> index_;
  std::map<std::string, const onnx::TensorProto*> initializers_;
  std::map<std::string, const Node*> producer_;  // each output's node
  std::map<std::string, Folded> constants_;  // values known at import time
  std::string batch_ref_;                    // a tensor whose dim 0 is the batch
  std::map<std::string, Val> values_;        // imported so far
  std::set<std::string> consumed_mask_;      // outputs something needed reads
  std::map<std::string, std::vector<const Node*>> readers_;  // the needed nodes reading each value
  // A zero Pad's output -> its [top, left, bottom, right]: its value is
  // the Pad's input (with the padded shape), which only Convs read; each
  // adds these to its pads.
  std::map<std::string, std::vector<int64_t>> conv_pads_;
  OnnxImport result_;
};

}  // namespace onnx_internal
}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_ONNX_IMPORTER_H_
