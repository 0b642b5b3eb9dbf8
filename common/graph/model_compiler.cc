#include "common/graph/model_compiler.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/graph/graph_analysis.h"
#include "common/graph/graph_builder.h"
#include "common/graph/onnx_import.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

// The metrics by Keras' names, and the op each compiles to.
constexpr char kKnownMetrics[] =
    "accuracy, top_k_accuracy (k = 5), top_<K>_accuracy, mae, mean_absolute_error, precision, recall, auc";

struct MetricOp {
  std::string op;
  Attrs attrs;
};

// The op of model.metric[i] `name`, refused (naming it) when unknown or
// when it does not fit the loss and the model's output `shape` (nullptr:
// not known yet).
absl::StatusOr<MetricOp> MetricOpFor(const std::string& name, LossDef::Kind loss, const Shape* shape, int i) {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.metric[", i, "]: \"", name, "\" ", why, "; the metrics are: ", kKnownMetrics));
  };
  const bool one_output =
      shape == nullptr || (!shape->empty() && (shape->size() == 1 || (shape->size() == 2 && (*shape)[1] == 1)));
  if (name == "accuracy") return MetricOp{"Accuracy", {}};
  int64_t k = 0;
  if (name == "top_k_accuracy") {
    k = 5;
  } else if (absl::StartsWith(name, "top_") && absl::EndsWith(name, "_accuracy")) {
    absl::string_view digits = absl::string_view(name).substr(4, name.size() - 4 - 9);
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
        !absl::SimpleAtoi(digits, &k) || k < 1) {
      return refuse("is no metric (top_<K>_accuracy needs a positive K)");
    }
  }
  if (k > 0) {
    if (loss != LossDef::SOFTMAX_CROSS_ENTROPY) return refuse("needs a softmax cross-entropy loss over classes");
    return MetricOp{"TopKAccuracy", {{"k", AttrI(k)}}};
  }
  if (name == "mae" || name == "mean_absolute_error") {
    if (loss != LossDef::MEAN_SQUARED_ERROR) return refuse("is a regression metric: it needs a mean squared error loss");
    return MetricOp{"MeanAbsoluteError", {}};
  }
  if (name == "precision" || name == "recall" || name == "auc") {
    if (loss != LossDef::SIGMOID_CROSS_ENTROPY || !one_output) {
      return refuse(absl::StrCat("is a binary metric: it needs a sigmoid cross-entropy loss on one output, not ",
                                 LossDef::Kind_Name(loss), shape ? absl::StrCat(" on ", ShapeString(*shape)) : ""));
    }
    if (name == "auc") return MetricOp{"Auc", {{"num_thresholds", AttrI(200)}}};
    return MetricOp{name == "precision" ? "Precision" : "Recall", {}};
  }
  return refuse("is no metric");
}

// What a layer's output is: a tensor name and its shape.
struct Value {
  std::string tensor;
  Shape shape;
};

class Compiler {
 public:
  explicit Compiler(const TrainingJob& job) : job_(job), b_(&model_.graph) {}

  absl::StatusOr<CompiledModel> Run();

 private:
  absl::Status Fail(int i, const LayerDef& l, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.sequential.layer[", i, "] (", Name(i, l), "): ", what));
  }
  std::string Name(int i, const LayerDef& l) const { return LayerName(l, i); }
  std::string Variable(const std::string& name, const std::vector<int64_t>& shape,
                       const InitializerDef& init, VariableDef::Kind kind = VariableDef::DENSE) {
    VariableDef v;
    v.set_name(name);
    v.set_kind(kind);
    v.set_dtype(DT_FLOAT);
    for (int64_t d : shape) v.mutable_shape()->add_dim(d);
    *v.mutable_initializer() = init;
    v.set_seed(job_.seed());
    model_.variables.push_back(v);
    std::vector<int64_t> node_shape = shape;
    if (kind != VariableDef::DENSE) node_shape[0] = -1;  // the batch's rows only
    return b_.Add("Variable", name, {}, {{"shape", AttrShape(node_shape)}, {"dtype", AttrType(DT_FLOAT)}});
  }
  Value Activate(const std::string& prefix, Value v, Activation a, bool keep_logits) {
    if (keep_logits) return v;
    switch (a) {
      case RELU: return {b_.Add("Relu", prefix + "/relu", {v.tensor}), v.shape};
      case SIGMOID: return {b_.Add("Sigmoid", prefix + "/sigmoid", {v.tensor}), v.shape};
      case TANH: return {b_.Add("Tanh", prefix + "/tanh", {v.tensor}), v.shape};
      case SOFTMAX: return {b_.Add("Softmax", prefix + "/softmax", {v.tensor}), v.shape};
      default: return v;
    }
  }
  absl::StatusOr<Value> Layer(int i, const LayerDef& l, const std::vector<Value>& in, bool last);
  absl::StatusOr<Value> Sequential();
  absl::StatusOr<Value> Onnx(const OnnxModel& o);

  // Keras' l1/l2 regularizer of one variable: l1 * sum(|w|) + l2 * sum(w^2)
  // as graph ops (|w| as relu(w) + relu(-w), whose gradient is sign(w) and 0
  // at 0, as TensorFlow's), kept in regularization_ for the loss.
  absl::Status Regularize(int i, const LayerDef& l, const std::string& var, const RegularizerDef& r,
                          const std::string& which) {
    if (!(r.l1() >= 0.0f && r.l1() < 1e30f) || !(r.l2() >= 0.0f && r.l2() < 1e30f)) {
      return Fail(i, l, absl::StrCat(which, ": l1 ", r.l1(), " and l2 ", r.l2(), " must be finite and >= 0"));
    }
    auto scaled = [&](const std::string& x, float by, const std::string& hint) {
      const std::string factor = b_.Add("Const", var + "/" + hint + "_factor", {}, {{"value", AttrTensor(Tensor::Scalar<float>(by))}});
      return b_.Add("BroadcastMul", var + "/" + hint, {x, factor});
    };
    if (r.l2() > 0.0f) {
      const std::string squares = b_.Add("Mul", var + "/l2_squares", {var, var});
      regularization_.push_back(scaled(b_.Add("ReduceSum", var + "/l2_sum", {squares}), r.l2(), "l2"));
    }
    if (r.l1() > 0.0f) {
      const std::string pos = b_.Add("Relu", var + "/l1_pos", {var});
      const std::string neg = b_.Add("Relu", var + "/l1_neg", {scaled(var, -1.0f, "l1_negated")});
      const std::string abs = b_.Add("AddN", var + "/l1_abs", {pos, neg});
      regularization_.push_back(scaled(b_.Add("ReduceSum", var + "/l1_sum", {abs}), r.l1(), "l1"));
    }
    return absl::OkStatus();
  }

  const TrainingJob& job_;
  CompiledModel model_;
  GraphBuilder b_;
  std::vector<std::string> regularization_;  // scalar terms added to the loss
  std::map<std::string, Value> values_;  // by layer or feature name
  // model.onnx: moving-average variable -> the batch statistic it takes.
  std::map<std::string, std::string> moving_statistics_;
};

absl::StatusOr<Value> Compiler::Layer(int i, const LayerDef& l, const std::vector<Value>& in, bool last) {
  const std::string name = Name(i, l);
  const Value& x = in[0];
  // With a softmax (or sigmoid) loss, the last activation is folded into it.
  const bool fold = last && ((job_.model().loss().kind() == LossDef::SOFTMAX_CROSS_ENTROPY) ||
                             (job_.model().loss().kind() == LossDef::SIGMOID_CROSS_ENTROPY));
  if ((l.has_kernel_regularizer() || l.has_bias_regularizer()) && l.kind_case() != LayerDef::kDense &&
      l.kind_case() != LayerDef::kConv2D) {
    return Fail(i, l,
                l.kind_case() == LayerDef::kEmbedding || l.kind_case() == LayerDef::kEmbeddingBag
                    ? "a regularizer of an embedding table is not supported (a step pulls and pushes only the "
                      "batch's rows; a penalty over the whole table would touch every row)"
                    : "kernel_regularizer and bias_regularizer are for dense and conv2d layers; this one has no weights");
  }
  switch (l.kind_case()) {
    case LayerDef::kDense: {
      const DenseLayer& d = l.dense();
      if (d.units() <= 0) return Fail(i, l, "units must be positive");
      if (x.shape.size() != 2) {
        return Fail(i, l, absl::StrCat("input is ", ShapeString(x.shape), "; add a flatten layer before it"));
      }
      std::string w = Variable(name + "/kernel", {x.shape[1], d.units()}, d.kernel_initializer());
      if (l.has_kernel_regularizer()) RETURN_IF_ERROR(Regularize(i, l, w, l.kernel_regularizer(), "kernel_regularizer"));
      if (d.no_bias() && l.has_bias_regularizer()) return Fail(i, l, "bias_regularizer on a layer with no_bias");
      Value y{b_.Add("MatMul", name + "/matmul", {x.tensor, w}), {x.shape[0], d.units()}};
      if (!d.no_bias()) {
        std::string bias = Variable(name + "/bias", {d.units()}, d.bias_initializer());
        if (l.has_bias_regularizer()) RETURN_IF_ERROR(Regularize(i, l, bias, l.bias_regularizer(), "bias_regularizer"));
        y.tensor = b_.Add("BiasAdd", name + "/bias_add", {y.tensor, bias});
      }
      bool keep = fold && (d.activation() == SOFTMAX || d.activation() == SIGMOID);
      return Activate(name, y, d.activation(), keep);
    }
    case LayerDef::kConv2D: {
      const Conv2DLayer& c = l.conv2d();
      if (x.shape.size() != 4) return Fail(i, l, absl::StrCat("input must be [batch, h, w, channels], got ", ShapeString(x.shape)));
      if (c.filters() <= 0 || c.kernel_size() <= 0) return Fail(i, l, "filters and kernel_size must be positive");
      int64_t stride = c.stride() > 0 ? c.stride() : 1;
      bool same = c.padding() == SAME;
      std::string k = Variable(name + "/kernel", {c.kernel_size(), c.kernel_size(), x.shape[3], c.filters()},
                               c.kernel_initializer());
      std::string bias = Variable(name + "/bias", {c.filters()}, c.bias_initializer());
      if (l.has_kernel_regularizer()) RETURN_IF_ERROR(Regularize(i, l, k, l.kernel_regularizer(), "kernel_regularizer"));
      if (l.has_bias_regularizer()) RETURN_IF_ERROR(Regularize(i, l, bias, l.bias_regularizer(), "bias_regularizer"));
      auto out = [&](int64_t v) { return same ? (v + stride - 1) / stride : (v - c.kernel_size() + stride) / stride; };
      if (out(x.shape[1]) <= 0 || out(x.shape[2]) <= 0) return Fail(i, l, "kernel larger than its input");
      std::string conv = b_.Add("Conv2D", name + "/conv", {x.tensor, k},
                                {{"stride", AttrI(stride)}, {"padding", AttrS(same ? "SAME" : "VALID")}});
      Value y{b_.Add("BiasAdd", name + "/bias_add", {conv, bias}),
              {x.shape[0], out(x.shape[1]), out(x.shape[2]), c.filters()}};
      return Activate(name, y, c.activation(), false);
    }
    case LayerDef::kMaxPool2D: {
      const MaxPool2DLayer& p = l.max_pool2d();
      if (x.shape.size() != 4) return Fail(i, l, absl::StrCat("input must be [batch, h, w, channels], got ", ShapeString(x.shape)));
      int64_t k = p.pool_size() > 0 ? p.pool_size() : 2, s = p.stride() > 0 ? p.stride() : k;
      bool same = p.padding() == SAME;
      auto out = [&](int64_t v) { return same ? (v + s - 1) / s : (v - k + s) / s; };
      if (out(x.shape[1]) <= 0) return Fail(i, l, "pool larger than its input");
      return Value{b_.Add("MaxPool", name, {x.tensor},
                          {{"ksize", AttrI(k)}, {"stride", AttrI(s)}, {"padding", AttrS(same ? "SAME" : "VALID")}}),
                   {x.shape[0], out(x.shape[1]), out(x.shape[2]), x.shape[3]}};
    }
    case LayerDef::kFlatten: {
      int64_t n = 1;
      for (size_t k = 1; k < x.shape.size(); ++k) n *= x.shape[k];
      return Value{b_.Add("Reshape", name, {x.tensor}, {{"shape", AttrInts({-1, n})}}), {x.shape[0], n}};
    }
    case LayerDef::kDropout:
      if (l.dropout().rate() < 0 || l.dropout().rate() >= 1) return Fail(i, l, "rate must be in [0, 1)");
      return Value{b_.Add("Dropout", name, {x.tensor}, {{"rate", AttrF(l.dropout().rate())}}), x.shape};
    case LayerDef::kActivation:
      return Activate(name, x, l.activation().activation(), false);
    case LayerDef::kEmbedding:
    case LayerDef::kEmbeddingBag: {
      bool bag = l.kind_case() == LayerDef::kEmbeddingBag;
      int64_t rows = bag ? l.embedding_bag().input_dim() : l.embedding().input_dim();
      int64_t dim = bag ? l.embedding_bag().output_dim() : l.embedding().output_dim();
      InitializerDef init = bag ? l.embedding_bag().initializer() : l.embedding().initializer();
      if (dim <= 0) return Fail(i, l, "output_dim must be positive");
      if (init.kind() == InitializerDef::DEFAULT) {
        init.set_kind(InitializerDef::UNIFORM);
        init.set_minval(-0.05f);
        init.set_maxval(0.05f);
      }
      std::string feature = l.inputs_size() > 0 ? l.inputs(0) : "";
      bool found = false;
      for (const FeatureDef& f : job_.input().feature()) {
        if (f.kind() == FeatureDef::SPARSE && (feature.empty() || f.name() == feature)) {
          feature = f.name();
          found = true;
          break;
        }
      }
      if (!found) return Fail(i, l, "reads ids from a SPARSE input feature; the input has none by that name");
      std::string table = Variable(name + "/table", {rows, dim}, init,
                                   rows > 0 ? VariableDef::FIXED_TABLE : VariableDef::HASH_TABLE);
      TableInput t;
      t.feature = feature;
      t.index = b_.Add("Placeholder", name + "/index", {}, {{"shape", AttrShape({-1})}, {"dtype", AttrType(DT_INT64)}});
      t.row_splits = b_.Add("Placeholder", name + "/row_splits", {}, {{"shape", AttrShape({-1})}, {"dtype", AttrType(DT_INT64)}});
      model_.tables[name + "/table"] = t;
      for (NodeDef& n : *model_.graph.mutable_node()) {
        if (n.name() == table) (*n.mutable_attr())["feature"] = AttrS(feature);
      }
      std::string combiner = bag && l.embedding_bag().combiner() == EmbeddingBagLayer::MEAN ? "mean" : "sum";
      return Value{b_.Add("EmbeddingBag", name, {table, t.index, t.row_splits}, {{"combiner", AttrS(combiner)}}),
                   {-1, dim}};
    }
    case LayerDef::kConcat: {
      std::vector<std::string> tensors;
      Shape s = in[0].shape;
      for (size_t k = 0; k < in.size(); ++k) {
        if (in[k].shape.size() != 2) return Fail(i, l, "concatenates [batch, n] inputs");
        tensors.push_back(in[k].tensor);
        if (k > 0) s[1] += in[k].shape[1];
      }
      return Value{b_.Add("ConcatV2", name, tensors, {{"axis", AttrI(-1)}}), s};
    }
    default:
      return Fail(i, l, "no layer kind set");
  }
}

absl::StatusOr<Value> Compiler::Sequential() {
  const ModelDef& m = job_.model();
  if (m.sequential().layer_size() == 0) return absl::InvalidArgumentError("model.sequential has no layers");
  std::string first;
  for (const FeatureDef& f : job_.input().feature()) {
    if (f.kind() != FeatureDef::SPARSE && first.empty()) first = f.name();
  }
  std::string previous = first.empty() ? job_.input().feature(0).name() : first;
  Value out;
  for (int i = 0; i < m.sequential().layer_size(); ++i) {
    const LayerDef& l = m.sequential().layer(i);
    std::vector<Value> in;
    std::vector<std::string> names(l.inputs().begin(), l.inputs().end());
    bool embedding = l.kind_case() == LayerDef::kEmbedding || l.kind_case() == LayerDef::kEmbeddingBag;
    if (names.empty() && !embedding) names = {previous};
    for (const std::string& n : names) {
      auto it = values_.find(n);
      if (it == values_.end()) return Fail(i, l, absl::StrCat("input \"", n, "\" is no earlier layer or feature"));
      in.push_back(it->second);
    }
    if (in.empty()) in.push_back(Value{"", {-1}});
    ASSIGN_OR_RETURN(out, Layer(i, l, in, i + 1 == m.sequential().layer_size()));
    previous = Name(i, l);
    values_[previous] = out;
  }
  return out;
}

absl::StatusOr<Value> Compiler::Onnx(const OnnxModel& o) {
  auto fail = [&](const absl::Status& s) {
    return s.ok() ? s : absl::Status(s.code(), absl::StrCat("model.onnx (", o.path(), "): ", s.message()));
  };
  absl::StatusOr<onnx::ModelProto> model = ReadOnnxModel(o.path());
  if (!model.ok()) return fail(model.status());
  const onnx::GraphProto& g = model->graph();
  OnnxImportOptions options;
  options.seed = job_.seed();
  // Embedding tables by rows where a PS holds them; mirrored strategies
  // all-reduce dense variables only.
  const StrategyDef& strategy = job_.strategy();
  options.row_tables =
      !(strategy.has_multi_worker_mirrored() || strategy.has_mirrored() || strategy.has_central_storage());
  std::map<std::string, DataType> dtypes;
  for (const FeatureDef& f : job_.input().feature()) dtypes[f.name()] = f.dtype() == DT_INT64 ? DT_INT64 : DT_FLOAT;
  auto feed = [&](const std::string& input, const std::string& feature) -> absl::Status {
    auto it = values_.find(feature);
    if (it == values_.end() || it->second.tensor.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("input \"", input, "\": \"", feature, "\" is no DENSE input feature"));
    }
    options.inputs[input] = {it->second.tensor, it->second.shape, dtypes[feature]};
    return absl::OkStatus();
  };
  if (o.input_size() == 0) {
    std::vector<std::string> inputs, features;
    std::set<std::string> initializers;
    for (const auto& t : g.initializer()) initializers.insert(t.name());
    for (const auto& in : g.input()) {
      if (!initializers.count(in.name())) inputs.push_back(in.name());
    }
    for (const FeatureDef& f : job_.input().feature()) {
      if (f.kind() == FeatureDef::DENSE) features.push_back(f.name());
    }
    if (inputs.size() != 1 || features.size() != 1) {
      return fail(absl::InvalidArgumentError(absl::StrCat("the graph has ", inputs.size(), " inputs and the job ", features.size(),
                                                          " dense features: say which feeds which (input { input: ... feature: ... })")));
    }
    RETURN_IF_ERROR(fail(feed(inputs[0], features[0])));
  }
  for (const OnnxModel::Binding& b : o.input()) {
    absl::Status s = feed(b.input(), b.feature());
    if (!s.ok()) return fail(s);
  }
  std::string output = o.output();
  if (output.empty()) {
    if (g.output_size() != 1) {
      return fail(absl::InvalidArgumentError(absl::StrCat("the graph has ", g.output_size(), " outputs: say which the loss reads (output: ...)")));
    }
    output = g.output(0).name();
  }
  options.outputs = {output};
  absl::StatusOr<OnnxImport> imported = ImportOnnx(*model, options, &b_);
  if (!imported.ok()) return fail(imported.status());
  model_.variables = std::move(imported->variables);
  model_.onnx_initializers = std::move(imported->variable_of);
  for (const auto& [variable, table] : imported->tables) model_.tables[variable] = TableInput{table.feature, table.index, ""};
  moving_statistics_ = std::move(imported->moving_statistics);
  Value out{imported->outputs[output], imported->output_shapes[output]};
  // A last softmax (or sigmoid) belongs to the loss, which takes logits.
  const LossDef::Kind loss = job_.model().loss().kind();
  for (const NodeDef& n : model_.graph.node()) {
    if (n.name() != out.tensor) continue;
    if ((loss == LossDef::SOFTMAX_CROSS_ENTROPY && (n.op() == "Softmax" || n.op() == "LogSoftmax")) ||
        (loss == LossDef::SIGMOID_CROSS_ENTROPY && n.op() == "Sigmoid")) {
      out.tensor = n.input(0);
    }
  }
  return out;
}

absl::StatusOr<CompiledModel> Compiler::Run() {
  const ModelDef& m = job_.model();
  if (m.kind_case() == ModelDef::kGraph) {
    return absl::UnimplementedError("model.graph: raw graphs are not supported yet; use model.sequential");
  }
  if (job_.input().feature_size() == 0) return absl::InvalidArgumentError("input lists no features");
  for (const FeatureDef& f : job_.input().feature()) {
    if (f.kind() == FeatureDef::SPARSE) {
      values_[f.name()] = {"", {-1}};
      continue;
    }
    Shape s = {-1};
    s.insert(s.end(), f.shape().begin(), f.shape().end());
    const DataType dtype = f.dtype() == DT_INT64 ? DT_INT64 : DT_FLOAT;
    values_[f.name()] = {b_.Add("Placeholder", f.name(), {}, {{"shape", AttrShape(s)}, {"dtype", AttrType(dtype)}}), s};
  }
  bool classes = job_.input().num_classes() > 0;
  std::string label = b_.Add("Placeholder", "label", {},
                             {{"shape", AttrShape({-1})}, {"dtype", AttrType(classes ? DT_INT64 : DT_FLOAT)}});
  Value out;
  if (m.kind_case() == ModelDef::kOnnx) {
    ASSIGN_OR_RETURN(out, Onnx(m.onnx()));
  } else {
    ASSIGN_OR_RETURN(out, Sequential());
  }
  model_.logits = out.tensor;
  // Keras' label_smoothing (checked by ParseJob): the kernels mix each
  // target with the uniform distribution over the classes (2 for a sigmoid).
  Attrs loss_attrs;
  if (m.loss().label_smoothing() > 0.0f) loss_attrs["label_smoothing"] = AttrF(m.loss().label_smoothing());
  switch (m.loss().kind()) {
    case LossDef::SOFTMAX_CROSS_ENTROPY:
      if (!classes) return absl::InvalidArgumentError("softmax cross-entropy needs input.num_classes");
      if (out.shape.size() != 2 || out.shape[1] != job_.input().num_classes()) {
        return absl::InvalidArgumentError(absl::StrCat("the model's output is ", ShapeString(out.shape),
                                                       " but input.num_classes is ", job_.input().num_classes()));
      }
      model_.loss = b_.Add("SoftmaxCrossEntropy", "loss", {out.tensor, label}, loss_attrs);
      break;
    case LossDef::SIGMOID_CROSS_ENTROPY:
      model_.loss = b_.Add("SigmoidCrossEntropy", "loss", {out.tensor, label}, loss_attrs);
      break;
    default:
      model_.loss = b_.Add("MeanSquaredError", "loss", {out.tensor, label});
  }
  if (!regularization_.empty()) {
    // The loss a step trains and evaluation reports: the data's loss plus
    // every regularization term (Keras' compute_loss adds model.losses).
    std::vector<std::string> terms = {model_.loss};
    terms.insert(terms.end(), regularization_.begin(), regularization_.end());
    model_.loss = b_.Add("AddN", "total_loss", terms);
  }
  std::vector<std::string> fetches = {model_.loss, model_.logits};
  for (int i = 0; i < m.metric_size(); ++i) {
    const std::string& metric = m.metric(i);
    ASSIGN_OR_RETURN(MetricOp op, MetricOpFor(metric, m.loss().kind(), &out.shape, i));
    if (model_.metrics.count(metric)) {
      return absl::InvalidArgumentError(absl::StrCat("model.metric[", i, "]: \"", metric, "\" is listed twice"));
    }
    model_.metrics[metric] = b_.Add(op.op, metric, {out.tensor, label}, op.attrs);
    fetches.push_back(model_.metrics[metric]);
  }
  if (m.kind_case() == ModelDef::kOnnx) {
    // An imported graph may hold weights the loss does not read (a branch
    // that stops at a constant, a folded head): they are no variables.
    ASSIGN_OR_RETURN(GraphDef forward, Prune(model_.graph, {model_.loss}));
    std::set<std::string> kept;
    for (const NodeDef& n : forward.node()) kept.insert(n.name());
    std::vector<VariableDef> used;
    for (VariableDef& v : model_.variables) {
      if (kept.count(v.name())) used.push_back(std::move(v));
    }
    model_.variables = std::move(used);
  }
  // Gradients of the trained variables; a moving-average variable's
  // "gradient" is the forward statistic the store folds into it (no
  // derivative is taken of it or through it).
  std::vector<std::string> vars;
  for (const VariableDef& v : model_.variables) {
    if (!v.has_moving_average()) vars.push_back(v.name());
  }
  ASSIGN_OR_RETURN(model_.gradients, AddGradients(&model_.graph, model_.loss, vars));
  for (const VariableDef& v : model_.variables) {
    if (!v.has_moving_average()) continue;
    auto stat = moving_statistics_.find(v.name());
    if (stat == moving_statistics_.end()) {
      return absl::InternalError(absl::StrCat("moving-average variable ", v.name(), " has no statistic"));
    }
    model_.gradients[v.name()] = stat->second;
  }
  for (const auto& [v, g] : model_.gradients) fetches.push_back(g);
  ASSIGN_OR_RETURN(model_.graph, Prune(model_.graph, fetches));
  RETURN_IF_ERROR(ValidateGraph(model_.graph).status());
  return model_;
}

}  // namespace

std::string LayerName(const LayerDef& l, int i) {
  if (!l.name().empty()) return l.name();
  const auto* field = LayerDef::descriptor()->FindFieldByNumber(l.kind_case());
  return absl::StrCat(field ? field->name() : "layer", "_", i);
}

absl::StatusOr<CompiledModel> CompileModel(const TrainingJob& job) { return Compiler(job).Run(); }

absl::Status CheckMetrics(const ModelDef& model) {
  std::set<std::string> seen;
  for (int i = 0; i < model.metric_size(); ++i) {
    RETURN_IF_ERROR(MetricOpFor(model.metric(i), model.loss().kind(), nullptr, i).status());
    if (!seen.insert(model.metric(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("model.metric[", i, "]: \"", model.metric(i), "\" is listed twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace psrt
