// Real exported models: examples/onnx/{mlp,cnn,cnn_bn,ops,resnet,resnet_bn,vit,mobilenetv2,tokens}.onnx, written by
// torch.onnx.export (examples/onnx/make_models.py), and keras_cnn.onnx,
// written by Keras 3's model.export (examples/onnx/make_keras_models.py),
// compiled as a job compiles them, one step's loss and gradients on a
// fixed batch against PyTorch's autograd (tf.GradientTape's for Keras)
// from the same initial weights (the script's <model>.reference.pb). Goal:
// each variable's gradient within 1e-4 relative error (norm of the
// difference over the norm of the framework's).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/compute/executor.h"
#include "common/graph/model_compiler.h"
#include "common/graph/onnx_import.h"
#include "common/optimizer.h"
#include "common/plan/job_planner.h"
#include "common/plan/placement.h"
#include "common/store/variable.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

std::map<std::string, Tensor> ReadReference(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  onnx::GraphProto g;
  EXPECT_TRUE(g.ParseFromString(ss.str())) << path;
  std::map<std::string, Tensor> out;
  for (const auto& t : g.initializer()) {
    absl::StatusOr<Tensor> v = OnnxTensor(t, t.name());
    EXPECT_TRUE(v.ok()) << v.status();
    // As the importer names variables: tf2onnx's initializers end in ":0".
    std::string name = t.name();
    std::replace(name.begin(), name.end(), ':', '_');
    if (v.ok()) out[name] = *v;
  }
  return out;
}

double Norm(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = a[i] - (b ? b[i] : 0.0f);
    s += d * d;
  }
  return std::sqrt(s);
}

class OnnxTorchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxTorchTest, GradientsMatchTheFrameworks) {
  // "<model>@mirrored": compiled for a mirrored strategy (an embedding
  // table dense rather than pulled by rows).
  std::string model = GetParam();
  const bool mirrored = model.size() > 9 && model.substr(model.size() - 9) == "@mirrored";
  if (mirrored) model.resize(model.size() - 9);
  std::map<std::string, Tensor> ref = ReadReference("examples/onnx/" + model + ".reference.pb");
  ASSERT_TRUE(ref.count("input") && ref.count("label") && ref.count("loss"));

  // make_keras_models.py's files: the only graph output ("Identity:0")
  // and input ("image", NHWC as the feature) need no binding.
  const bool keras = model.rfind("keras_", 0) == 0;
  // "tokens" reads each pixel's byte as a token id: an id feature [784].
  const bool tokens = model == "tokens";
  TrainingJob job;
  job.mutable_model()->mutable_onnx()->set_path("examples/onnx/" + model + ".onnx");
  if (!keras) job.mutable_model()->mutable_onnx()->set_output("logits");
  auto* f = job.mutable_input()->add_feature();
  f->set_name(tokens ? "tokens" : "image");
  if (tokens) {
    f->add_shape(784);
    f->set_dtype(DT_INT64);
  } else {
    for (int64_t d : {28, 28, 1}) f->add_shape(d);  // the IDX reader's image
  }
  if (mirrored) job.mutable_strategy()->mutable_multi_worker_mirrored();
  job.mutable_input()->set_num_classes(10);
  absl::StatusOr<CompiledModel> c = CompileModel(job);
  ASSERT_TRUE(c.ok()) << c.status();
  // The training-mode export keeps PyTorch's Dropout layers (ratio 0.2
  // twice in the MLP, 0.3 once in the CNN); the step below runs with
  // training off, as PyTorch's reference ran in eval mode.
  std::vector<float> rates;
  for (const NodeDef& n : c->graph.node()) {
    if (n.op() == "Dropout") rates.push_back(GetAttrF(n, "rate"));
  }
  const std::map<std::string, std::vector<float>> want_rates = {
      {"mlp", {0.2f, 0.2f}}, {"cnn", {0.3f}}, {"cnn_bn", {}}, {"ops", {}}, {"resnet", {}}, {"resnet_bn", {}},
      {"vit", std::vector<float>(8, 0.1f)}, {"mobilenetv2", {}}, {"keras_cnn", {}}, {"tokens", {}}};
  EXPECT_EQ(rates, want_rates.at(model));
  if (model == "vit") {
    // PyTorch's GELU (Div, Erf, Add, Mul, Mul) is fused into one op.
    int gelu = 0, erf = 0;
    for (const NodeDef& n : c->graph.node()) {
      gelu += n.op() == "Gelu";
      erf += n.op() == "Erf";
    }
    EXPECT_EQ(gelu, 2);
    EXPECT_EQ(erf, 0);
  }

  if (tokens) {
    // The token table is pulled by rows under the PS strategy (fed whole
    // here, its index the ids themselves, as evaluation feeds it); under
    // mirrored ones it is dense. The position embedding's Gather of the
    // constant positions is a Slice of a dense variable either way.
    EXPECT_EQ(c->tables.size(), mirrored ? 0u : 1u);
    for (const VariableDef& v : c->variables) {
      EXPECT_EQ(v.kind(), v.name() == "tok.weight" && !mirrored ? VariableDef::FIXED_TABLE : VariableDef::DENSE)
          << v.name();
    }
  }

  // The batch: PyTorch's NCHW [32, 1, 28, 28] is the same bytes as the
  // feature's [32, 28, 28, 1]; token ids are fed as they are.
  const Tensor& x = ref["input"];
  absl::StatusOr<Tensor> image = tokens ? x : x.Reshape(TensorShape({x.shape().dim(0), 28, 28, 1}));
  ASSERT_TRUE(image.ok());
  std::map<std::string, Tensor> feeds = {{tokens ? "tokens" : "image", *image}, {"label", ref["label"]}};
  for (const auto& [table, in] : c->tables) feeds[in.index] = x;
  std::vector<std::string> fetches = {c->loss};
  std::vector<std::string> names;
  bool batch_norm = false;
  for (const VariableDef& v : c->variables) {
    absl::StatusOr<Tensor> t = Tensor::FromProto(v.initializer().tensor());
    ASSERT_TRUE(t.ok()) << v.name() << ": " << t.status();
    feeds[v.name()] = *t;
    // A BatchNormalization's running statistics are no parameters: checked
    // by BatchNormMovingStatisticsMatchPyTorch below.
    if (v.has_moving_average()) {
      batch_norm = true;
      continue;
    }
    names.push_back(v.name());
    fetches.push_back(c->gradients.at(v.name()));
  }
  ASSERT_EQ(names.size() + 3, ref.size()) << "a variable per PyTorch parameter";
  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(c->graph, ExecutorOptions{2});
  ASSERT_TRUE(exec.ok()) << exec.status();
  // PyTorch's reference ran a model with batch normalisation in train mode
  // (the batch's statistics; such a model has no dropout), any other in
  // eval mode (no dropout).
  absl::StatusOr<std::vector<Tensor>> out = (*exec)->Run(feeds, fetches, 1, /*training=*/batch_norm);
  ASSERT_TRUE(out.ok()) << out.status();

  const float loss = (*out)[0].data<float>()[0], want = ref["loss"].data<float>()[0];
  std::cout << model << ": loss psrt " << loss << (keras ? " TensorFlow " : " PyTorch ") << want << " relative error "
            << std::fabs(loss - want) / std::fabs(want) << "\n";
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want));
  // A gradient that is zero in exact arithmetic is float noise in both
  // (in MobileNetV2, the bias of each block's last BatchNormalization: every
  // path from it runs through a convolution into another training-mode
  // BatchNormalization, which subtracts the mean it shifts, so PyTorch's
  // norms are ~1e-8 and ours differ from them by as much): the error is
  // taken relative to at least 1e-3 of the whole model's gradient norm, so
  // such a variable may differ by float32's epsilon (1e-7) of that norm.
  double all = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    auto r = ref.find("grad/" + names[i]);
    ASSERT_NE(r, ref.end()) << "the reference has no gradient for " << names[i];
    const double norm = Norm(r->second.data<float>(), nullptr, r->second.NumElements());
    all += norm * norm;
  }
  const double floor = 1e-3 * std::sqrt(all);
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& want_g = ref["grad/" + names[i]];
    const Tensor& g = (*out)[i + 1];
    ASSERT_EQ(g.shape(), want_g.shape()) << names[i];
    const int64_t n = g.NumElements();
    const double norm = Norm(want_g.data<float>(), nullptr, n);
    const double diff = Norm(g.data<float>(), want_g.data<float>(), n);
    const double rel = diff / std::max(norm, floor);
    std::cout << "  " << names[i] << " " << g.shape().ToString() << ": relative error " << rel;
    if (norm < floor) std::cout << " (of the floor " << floor << "; PyTorch's norm " << norm << ", ours differs by " << diff << ")";
    std::cout << "\n";
    EXPECT_LE(rel, 1e-4) << names[i];
  }
}

// The PS starts every variable from the file's values, a variable split by
// rows over 2 PS included: each store's slice is its rows of the file's
// tensor (what a PS's CreateVariables makes of the chief's plan).
TEST(OnnxPsTest, TheParameterServersStartFromTheFilesWeights) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_onnx_mlp.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_partition_threshold_bytes(100 << 10);  // splits 1.weight (784 KiB) and 4.weight (128 KiB)
  absl::StatusOr<JobPlan> plan = PlanJob(*job, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  onnx::ModelProto model = *ReadOnnxModel("examples/onnx/mlp.onnx");
  std::map<std::string, Tensor> file;
  for (const auto& t : model.graph().initializer()) {
    if (t.data_type() == onnx::TensorProto::FLOAT && t.dims_size() > 0) file[t.name()] = *OnnxTensor(t, t.name());
  }
  OptimizerDef sgd;
  sgd.mutable_sgd()->set_learning_rate(0.1f);
  std::unique_ptr<Optimizer> optimizer = *Optimizer::Create(sgd);
  int split = 0, checked = 0;
  for (int store = 0; store < 2; ++store) {
    for (const VariableDef& def : VariablesOnStore(plan->placement, store)) {
      SCOPED_TRACE(def.name());
      absl::StatusOr<std::unique_ptr<Variable>> v = Variable::Create(def, optimizer.get());
      ASSERT_TRUE(v.ok()) << v.status();
      absl::StatusOr<Tensor> value = (*v)->Read();
      ASSERT_TRUE(value.ok()) << value.status();
      const Tensor& whole = file.at(def.name());
      const int64_t begin = def.row_end() > 0 ? def.row_begin() : 0;
      const int64_t row = whole.shape().rank() < 2 ? 1 : whole.shape().row_elements();
      split += def.row_end() > 0;
      ASSERT_LE((begin * row + value->NumElements()), whole.NumElements());
      for (int64_t i = 0; i < value->NumElements(); ++i) {
        ASSERT_EQ(value->data<float>()[i], whole.data<float>()[begin * row + i]) << i;
      }
      ++checked;
    }
  }
  EXPECT_EQ(split, 4) << "1.weight and 4.weight are split over both PS";
  EXPECT_EQ(checked, 8);  // 6 variables, two of them in two slices
}

// Batch normalisation's moving statistics against PyTorch's running_mean /
// running_var (examples/onnx/make_bn_steps.py): from resnet_bn.onnx's
// weights, a few plain SGD steps in train mode, each variable applied as
// the store applies it (Variable::ApplyDense: SGD for the trained ones, the
// moving-average assignment for the statistics), then the eval-mode loss
// on a test batch (the kernels normalising with the moving statistics).
TEST(OnnxTorchTest, BatchNormMovingStatisticsMatchPyTorch) {
  std::map<std::string, Tensor> ref = ReadReference("examples/onnx/resnet_bn.steps.pb");
  ASSERT_TRUE(ref.count("input") && ref.count("label") && ref.count("eval_input") && ref.count("eval_loss"));
  TrainingJob job;
  job.mutable_model()->mutable_onnx()->set_path("examples/onnx/resnet_bn.onnx");
  job.mutable_model()->mutable_onnx()->set_output("logits");
  auto* f = job.mutable_input()->add_feature();
  f->set_name("image");
  for (int64_t d : {28, 28, 1}) f->add_shape(d);
  job.mutable_input()->set_num_classes(10);
  absl::StatusOr<CompiledModel> c = CompileModel(job);
  ASSERT_TRUE(c.ok()) << c.status();
  OptimizerDef sgd;
  sgd.mutable_sgd()->set_learning_rate(ref["lr"].data<float>()[0]);
  std::unique_ptr<Optimizer> optimizer = *Optimizer::Create(sgd);
  std::map<std::string, std::unique_ptr<Variable>> vars;
  std::vector<std::string> names, fetches = {c->loss};
  int moving = 0;
  for (const VariableDef& v : c->variables) {
    absl::StatusOr<std::unique_ptr<Variable>> var = Variable::Create(v, optimizer.get());
    ASSERT_TRUE(var.ok()) << var.status();
    vars[v.name()] = *std::move(var);
    names.push_back(v.name());
    fetches.push_back(c->gradients.at(v.name()));
    if (v.has_moving_average()) {
      ++moving;
      EXPECT_FLOAT_EQ(v.moving_average().momentum(), 0.9f) << v.name();  // PyTorch's 0.1
    }
  }
  EXPECT_EQ(moving, 18);  // 9 BatchNorm2d, a mean and a variance each
  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(c->graph, ExecutorOptions{2});
  ASSERT_TRUE(exec.ok()) << exec.status();
  auto values = [&] {
    std::map<std::string, Tensor> feeds;
    for (const auto& [name, v] : vars) feeds[name] = *v->Read();
    return feeds;
  };
  const int64_t batch = 32, steps = ref["train_loss"].NumElements();
  ASSERT_EQ(ref["input"].shape().dim(0), steps * batch);
  for (int64_t s = 0; s < steps; ++s) {
    std::map<std::string, Tensor> feeds = values();
    feeds["image"] = *ref["input"].Slice(s * batch, (s + 1) * batch).Copy().Reshape(TensorShape({batch, 28, 28, 1}));
    feeds["label"] = ref["label"].Slice(s * batch, (s + 1) * batch).Copy();
    absl::StatusOr<std::vector<Tensor>> out = (*exec)->Run(feeds, fetches, 1, /*training=*/true);
    ASSERT_TRUE(out.ok()) << out.status();
    const float loss = (*out)[0].data<float>()[0], want = ref["train_loss"].data<float>()[s];
    EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << "step " << s;
    for (size_t i = 0; i < names.size(); ++i) ASSERT_TRUE(vars[names[i]]->ApplyDense((*out)[i + 1]).ok()) << names[i];
  }
  // The moving statistics (by the file's running_mean / running_var names)
  // and the trained weights after the steps.
  double worst_running = 0, worst_weight = 0;
  int running = 0;
  for (const auto& [onnx_name, variable] : c->onnx_initializers) {
    const bool stat = ref.count("running/" + onnx_name) > 0;
    auto r = ref.find((stat ? "running/" : "weight/") + onnx_name);
    ASSERT_NE(r, ref.end()) << onnx_name;
    const Tensor got = *vars.at(variable)->Read();
    ASSERT_EQ(got.NumElements(), r->second.NumElements()) << onnx_name;
    const double rel = Norm(got.data<float>(), r->second.data<float>(), got.NumElements()) /
                       Norm(r->second.data<float>(), nullptr, got.NumElements());
    EXPECT_LE(rel, 1e-5) << onnx_name;
    (stat ? worst_running : worst_weight) = std::max(stat ? worst_running : worst_weight, rel);
    running += stat;
  }
  EXPECT_EQ(running, 18);
  // Evaluation normalises with the moving statistics.
  std::map<std::string, Tensor> feeds = values();
  const Tensor& ex = ref["eval_input"];
  feeds["image"] = *ex.Reshape(TensorShape({ex.shape().dim(0), 28, 28, 1}));
  feeds["label"] = ref["eval_label"];
  absl::StatusOr<std::vector<Tensor>> out = (*exec)->Run(feeds, {c->loss}, 1, /*training=*/false);
  ASSERT_TRUE(out.ok()) << out.status();
  const float eval = (*out)[0].data<float>()[0], want = ref["eval_loss"].data<float>()[0];
  std::cout << "resnet_bn after " << steps << " SGD steps: running statistics relative error " << worst_running
            << " (worst), weights " << worst_weight << "; eval-mode loss psrt " << eval << " PyTorch " << want
            << " relative error " << std::fabs(eval - want) / std::fabs(want) << "\n";
  EXPECT_NEAR(eval, want, 1e-5 * std::fabs(want));
}

// ops: strided, padded, dilated, grouped and depthwise Conv, Clip (ReLU6),
// AveragePool, broadcasting Mul/Sub/Div against parameters, ReduceMean and
// ReduceSum; resnet: residual Adds, strided 1x1 projections, a global pool;
// resnet_bn: the same with BatchNormalization (a training step: the batch's statistics);
// cnn_bn: a narrow CNN with BatchNormalization after each convolution;
// vit: PyTorch's nn.TransformerEncoderLayer (batched MatMul, Softmax,
// LayerNormalization, Erf, Expand, Concat, Gather, the exporter's shape
// arithmetic on the batch size) under a patch embedding and a class token;
// mobilenetv2: inverted residual blocks (1x1 expansion, depthwise 3x3,
// ReLU6, linear 1x1 projection, BatchNormalization throughout) behind a
// zero Pad of the 28x28 image to 32x32 (the TorchScript exporter's pad
// arithmetic: Shape, ConstantOfShape, a reversing Slice, Transpose).
INSTANTIATE_TEST_SUITE_P(Models, OnnxTorchTest,
                         ::testing::Values("mlp", "cnn", "cnn_bn", "ops", "resnet", "resnet_bn", "vit", "mobilenetv2"));
// tokens: the pixels' bytes as token ids (an int64 graph input), PyTorch's
// nn.Embedding (a Gather of the run-time ids: an EmbeddingLookup, the table
// pulled by rows under the PS strategy, dense under mirrored ones) plus a
// position embedding looked up with constant positions.
INSTANTIATE_TEST_SUITE_P(Tokens, OnnxTorchTest, ::testing::Values("tokens", "tokens@mirrored"));
// A Functional Keras 3 CNN (residual Add) through Keras' own
// model.export(format="onnx") (tf2onnx), against tf.GradientTape: NHWC
// input, the exporter's Reshape to NCHW, a Transpose back to NHWC before
// Flatten, its shape arithmetic, MatMul + Add for Dense.
INSTANTIATE_TEST_SUITE_P(Keras, OnnxTorchTest, ::testing::Values("keras_cnn"));

}  // namespace
}  // namespace psrt
