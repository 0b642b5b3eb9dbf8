#include "chief/export_formats/onnx_export.h"

#include "common/graph/onnx_import.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/graph/graph_analysis.h"
#include "common/graph/graph_builder.h"
#include "common/graph/window.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

constexpr int kOpset = 13;
constexpr int kIrVersion = 8;  // ONNX 1.10+; what opset 13 models carry

// psrt tensor names are "node" or "node:k"; every op we export has one
// output, so both name the node's output.
std::string NodeOf(const std::string& tensor) {
  return std::string(absl::StripSuffix(tensor, ":0"));
}

class OnnxBuilder {
 public:
  OnnxBuilder(const TrainingJob& job, const std::map<std::string, Tensor>& values) : job_(job), values_(values) {
    model_.set_ir_version(kIrVersion);
    model_.set_producer_name("psrt");
    model_.set_producer_version("1");
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    graph_ = model_.mutable_graph();
    graph_->set_name(job.name().empty() ? "psrt_model" : job.name());
  }

  absl::StatusOr<onnx::ModelProto> Run(const CompiledModel& compiled);

 private:
  onnx::NodeProto* Node(const std::string& op, const std::string& name, std::vector<std::string> in,
                        const std::string& out) {
    onnx::NodeProto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  static void Ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void Str(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  void Initializer(const std::string& name, const std::vector<int64_t>& dims, int type, const void* data,
                   size_t bytes) {
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(data, bytes);
  }
  // The ONNX value an input of a psrt node reads: a variable becomes an
  // initializer on first use, as stored or, for a conv kernel, transposed
  // to ONNX's [filters, in, kh, kw]. (A layer list gives each variable one
  // reader, so one layout serves it.)
  absl::StatusOr<std::string> Input(const std::string& tensor, bool conv_kernel = false);
  absl::Status Translate(const NodeDef& n);
  // x (NHWC) -> Transpose -> op (NCHW) -> Transpose -> `out` (NHWC).
  onnx::NodeProto* Nchw(const std::string& op, const std::string& name, const std::string& x,
                        std::vector<std::string> more, const std::string& out) {
    const std::string in_nchw = name + "/nchw_in", out_nchw = name + "/nchw_out";
    Ints(Node("Transpose", name + "/to_nchw", {x}, in_nchw), "perm", {0, 3, 1, 2});
    more.insert(more.begin(), in_nchw);
    onnx::NodeProto* core = Node(op, name, more, out_nchw);
    Ints(Node("Transpose", name + "/to_nhwc", {out_nchw}, out), "perm", {0, 2, 3, 1});
    return core;
  }

  const TrainingJob& job_;
  const std::map<std::string, Tensor>& values_;
  onnx::ModelProto model_;
  onnx::GraphProto* graph_;  // in model_
  std::map<std::string, const NodeDef*> nodes_;
  std::map<std::string, std::string> alias_;  // psrt node -> the ONNX value it is (dropout)
  std::set<std::string> initialized_;
};

absl::StatusOr<std::string> OnnxBuilder::Input(const std::string& tensor, bool conv_kernel) {
  const std::string node = NodeOf(tensor);
  if (auto a = alias_.find(node); a != alias_.end()) return a->second;
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second->op() != "Variable") return node;
  if (initialized_.count(node)) return node;
  auto v = values_.find(node);
  if (v == values_.end()) return absl::NotFoundError(absl::StrCat("no value for variable ", node));
  const Tensor& t = v->second;
  if (t.dtype() != DT_FLOAT) return absl::InvalidArgumentError(absl::StrCat(node, ": not a float variable"));
  initialized_.insert(node);
  if (!conv_kernel) {
    Initializer(node, t.shape().dims(), onnx::TensorProto::FLOAT, t.raw_data(), t.TotalBytes());
    return node;
  }
  if (t.shape().rank() != 4) return absl::InvalidArgumentError(absl::StrCat(node, ": a conv kernel must be 4-D"));
  const int64_t kh = t.shape().dim(0), kw = t.shape().dim(1), ci = t.shape().dim(2), co = t.shape().dim(3);
  std::vector<float> oihw(static_cast<size_t>(t.NumElements()));
  const float* hwio = t.data<float>();
  for (int64_t h = 0; h < kh; ++h)
    for (int64_t w = 0; w < kw; ++w)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t o = 0; o < co; ++o) {
          oihw[((o * ci + i) * kh + h) * kw + w] = hwio[((h * kw + w) * ci + i) * co + o];
        }
  Initializer(node, {co, ci, kh, kw}, onnx::TensorProto::FLOAT, oihw.data(), oihw.size() * sizeof(float));
  return node;
}

absl::Status OnnxBuilder::Translate(const NodeDef& n) {
  const std::string& op = n.op();
  auto in = [&](int i, bool kernel = false) -> absl::StatusOr<std::string> {
    if (i >= n.input_size()) return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), " lacks input ", i));
    return Input(n.input(i), kernel);
  };
  if (op == "Variable") return absl::OkStatus();  // an initializer where it is read
  if (op == "Placeholder") {
    onnx::ValueInfoProto* v = graph_->add_input();
    v->set_name(n.name());
    auto* type = v->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : GetAttrShape(n, "shape")) {
      auto* dim = type->mutable_shape()->add_dim();
      if (d < 0) {
        dim->set_dim_param("batch");
      } else {
        dim->set_dim_value(d);
      }
    }
    return absl::OkStatus();
  }
  if (op == "Dropout") {
    ASSIGN_OR_RETURN(alias_[n.name()], in(0));
    return absl::OkStatus();
  }
  static const std::map<std::string, std::string> kUnary = {
      {"Relu", "Relu"}, {"Sigmoid", "Sigmoid"}, {"Tanh", "Tanh"}, {"Softmax", "Softmax"}};
  if (auto u = kUnary.find(op); u != kUnary.end()) {
    ASSIGN_OR_RETURN(std::string x, in(0));
    Node(u->second, n.name(), {x}, n.name());
    return absl::OkStatus();
  }
  if (op == "MatMul" || op == "BiasAdd") {
    ASSIGN_OR_RETURN(std::string a, in(0));
    ASSIGN_OR_RETURN(std::string b, in(1));
    // BiasAdd adds along the last axis, as ONNX's broadcasting Add does.
    Node(op == "MatMul" ? "MatMul" : "Add", n.name(), {a, b}, n.name());
    return absl::OkStatus();
  }
  if (op == "Reshape") {
    ASSIGN_OR_RETURN(std::string x, in(0));
    const std::vector<int64_t> shape = GetAttrInts(n, "shape");
    const std::string shape_name = n.name() + "/shape";
    Initializer(shape_name, {static_cast<int64_t>(shape.size())}, onnx::TensorProto::INT64, shape.data(),
                shape.size() * sizeof(int64_t));
    Node("Reshape", n.name(), {x, shape_name}, n.name());
    return absl::OkStatus();
  }
  if (op == "Conv2D" || op == "MaxPool") {
    ASSIGN_OR_RETURN(std::string x, in(0));
    int64_t kh = 0, kw = 0;
    std::vector<std::string> more;
    if (op == "Conv2D") {
      ASSIGN_OR_RETURN(std::string w, in(1, /*kernel=*/true));
      auto v = values_.find(NodeOf(n.input(1)));
      if (v == values_.end() || v->second.shape().rank() != 4) {
        return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), ": its kernel is no 4-D variable"));
      }
      kh = v->second.shape().dim(0);
      kw = v->second.shape().dim(1);
      more.push_back(w);
    }
    Window2D win;
    if (absl::Status s = ReadWindow(n, kh, kw, &win); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), ": ", s.message()));
    }
    onnx::NodeProto* core = Nchw(op == "Conv2D" ? "Conv" : "MaxPool", n.name(), x, more, n.name());
    Ints(core, "kernel_shape", {win.kh, win.kw});
    Ints(core, "strides", {win.sh, win.sw});
    if (win.dh != 1 || win.dw != 1) Ints(core, "dilations", {win.dh, win.dw});
    if (win.group != 1) {
      onnx::AttributeProto* a = core->add_attribute();
      a->set_name("group");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(win.group);
    }
    if (win.padding == "EXPLICIT") {
      Ints(core, "pads", {win.pad_top, win.pad_left, win.pad_bottom, win.pad_right});
    } else {
      // TensorFlow's SAME puts the odd padding at the end: ONNX's SAME_UPPER.
      Str(core, "auto_pad", win.padding == "SAME" ? "SAME_UPPER" : "VALID");
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("node ", n.name(), " (op ", op, ") has no ONNX export yet; exported layers: dense, conv2d, "
                   "max_pool2d, flatten, dropout, activation"));
}

absl::StatusOr<onnx::ModelProto> OnnxBuilder::Run(const CompiledModel& compiled) {
  ASSIGN_OR_RETURN(GraphDef inference, Prune(compiled.graph, {compiled.logits}));
  ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder(inference));
  for (const NodeDef& n : inference.node()) nodes_[n.name()] = &n;
  for (int i : order) RETURN_IF_ERROR(Translate(inference.node(i)));
  ASSIGN_OR_RETURN(std::string logits, Input(compiled.logits));

  // The compiler leaves a last softmax (sigmoid) out of the logits when the
  // loss applies it (model_compiler.cc); inference applies it here.
  std::string result = logits;
  const auto& layers = job_.model().sequential().layer();
  const LossDef::Kind loss = job_.model().loss().kind();
  if (!layers.empty() && layers.rbegin()->kind_case() == LayerDef::kDense) {
    const Activation a = layers.rbegin()->dense().activation();
    if (a == SOFTMAX && loss == LossDef::SOFTMAX_CROSS_ENTROPY) {
      result = "output/softmax";
      Node("Softmax", result, {logits}, result);
    } else if (a == SIGMOID && loss == LossDef::SIGMOID_CROSS_ENTROPY) {
      result = "output/sigmoid";
      Node("Sigmoid", result, {logits}, result);
    }
  }
  Node("Identity", "output", {result}, "output");
  onnx::ValueInfoProto* out = graph_->add_output();
  out->set_name("output");
  auto* type = out->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  type->mutable_shape()->add_dim()->set_dim_param("batch");
  if (job_.input().num_classes() > 0) type->mutable_shape()->add_dim()->set_dim_value(job_.input().num_classes());
  if (graph_->input_size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the inference graph reads ", graph_->input_size(), " inputs; ONNX export takes one dense feature"));
  }
  return model_;
}

// An imported model goes back out as it came in: the user's own file, its
// graph untouched, each trained initializer's values replaced by the
// checkpoint's, and its Dropout nodes told they are not training (PyTorch
// exports a training-mode graph so that they come along: see
// examples/onnx/make_models.py).
absl::StatusOr<onnx::ModelProto> ExportImported(const TrainingJob& job, const CompiledModel& model,
                                                const std::map<std::string, Tensor>& values) {
  ASSIGN_OR_RETURN(onnx::ModelProto out, ReadOnnxModel(job.model().onnx().path()));
  onnx::GraphProto* g = out.mutable_graph();
  size_t written = 0;
  for (onnx::TensorProto& t : *g->mutable_initializer()) {
    auto var = model.onnx_initializers.find(t.name());
    if (var == model.onnx_initializers.end()) continue;
    auto v = values.find(var->second);
    if (v == values.end()) return absl::NotFoundError(absl::StrCat("the checkpoint has no value of ", var->second));
    const Tensor& value = v->second;
    const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    if (value.dtype() != DT_FLOAT || value.shape().dims() != dims) {
      return absl::InvalidArgumentError(absl::StrCat("variable ", var->second, " is ", value.shape().ToString(),
                                                     ", the model's initializer ", t.name(), " is ",
                                                     TensorShape(dims).ToString()));
    }
    t.clear_float_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(value.raw_data(), value.TotalBytes());
    ++written;
  }
  if (written != model.onnx_initializers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(model.onnx_initializers.size() - written,
                                                   " trained variables have no initializer in ", job.model().onnx().path()));
  }
  // BatchNormalization in inference mode: it normalises with running_mean
  // and running_var, which hold the trained moving statistics (written
  // above, as the variables they became). Its running-statistics outputs
  // exist in training mode only: they go where no node or graph output
  // reads them (the import refuses a graph whose loss reads them).
  std::set<std::string> read;
  for (const onnx::NodeProto& n : g->node()) read.insert(n.input().begin(), n.input().end());
  for (const onnx::ValueInfoProto& o : g->output()) read.insert(o.name());
  for (onnx::NodeProto& n : *g->mutable_node()) {
    if (n.op_type() != "BatchNormalization") continue;
    bool set = false;
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      if (a.name() != "training_mode") continue;
      a.set_type(onnx::AttributeProto::INT);
      a.set_i(0);
      set = true;
    }
    if (!set) {
      onnx::AttributeProto* a = n.add_attribute();
      a->set_name("training_mode");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(0);
    }
    while (n.output_size() > 1 && (n.output(n.output_size() - 1).empty() || !read.count(n.output(n.output_size() - 1)))) {
      n.mutable_output()->RemoveLast();
    }
  }
  const std::string inference = "psrt_inference_mode";
  bool dropout = false;
  for (onnx::NodeProto& n : *g->mutable_node()) {
    if (n.op_type() != "Dropout") continue;
    while (n.input_size() < 3) n.add_input("");
    n.set_input(2, inference);
    dropout = true;
  }
  if (dropout) {
    onnx::TensorProto* f = g->add_initializer();
    f->set_name(inference);
    f->set_data_type(onnx::TensorProto::BOOL);
    f->set_raw_data(std::string(1, '\0'));
  }
  out.set_producer_name("psrt");
  return out;
}

}  // namespace

absl::StatusOr<onnx::ModelProto> ExportOnnx(const TrainingJob& job, const CompiledModel& model,
                                            const std::map<std::string, Tensor>& values) {
  if (job.model().has_onnx()) return ExportImported(job, model, values);
  return OnnxBuilder(job, values).Run(model);
}

}  // namespace psrt
