// The Keras naming and the ONNX graph of the example models, checked
// without a checkpoint (weights made up); tests/export_test.cc runs the
// exported files through real TensorFlow and ONNX Runtime.
#include <set>

#include "chief/export_formats/keras_checkpoint.h"
#include "chief/export_formats/onnx_export.h"
#include "chief/export_formats/testing.h"
#include "common/graph/model_compiler.h"
#include "common/plan/job_planner.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using testing::Counting;

TrainingJob Load(const std::string& path) { return testing::LoadExample(path); }

// ExportOnnx of `job` with Counting weights, which go to *values if given.
absl::StatusOr<onnx::ModelProto> Onnx(const TrainingJob& job, std::map<std::string, Tensor>* values = nullptr) {
  absl::StatusOr<CompiledModel> compiled = CompileModel(job);
  if (!compiled.ok()) return compiled.status();
  std::map<std::string, Tensor> weights = Counting(*compiled);
  if (values != nullptr) *values = weights;
  return ExportOnnx(job, *compiled, weights);
}

TEST(KerasLayersTest, CnnLayersMapToKerasClassesAndTheirOperationIndex) {
  TrainingJob job = Load("examples/fashion_mnist_cnn.pbtxt");
  auto layers = KerasLayers(job);
  ASSERT_TRUE(layers.ok()) << layers.status();
  std::vector<std::string> classes;
  for (const KerasLayer& l : *layers) classes.push_back(l.class_name);
  EXPECT_EQ(classes, (std::vector<std::string>{"Conv2D", "MaxPooling2D", "Conv2D", "MaxPooling2D", "Flatten",
                                               "Dense", "Dropout", "Dense"}));
  ASSERT_EQ((*layers)[0].variables.size(), 2u);
  EXPECT_EQ((*layers)[0].variables[0], std::make_pair(std::string("_kernel"), std::string("conv2d_0/kernel")));
  EXPECT_EQ((*layers)[7].variables[1], std::make_pair(std::string("bias"), std::string("dense_7/bias")));
  EXPECT_NE((*layers)[0].config_json.find("\"padding\": \"same\""), std::string::npos) << (*layers)[0].config_json;
  // Operation 0 of a Keras Sequential model is its Input.
  EXPECT_EQ(KerasCheckpointKey(7, "bias"), "model/_functional/_operations/8/bias/.ATTRIBUTES/VARIABLE_VALUE");
}

TEST(KerasLayersTest, EmbeddingAndNamedInputsAreRefusedNamingTheLayer) {
  TrainingJob job = Load("examples/sparse_libsvm.pbtxt");
  auto layers = KerasLayers(job);
  ASSERT_FALSE(layers.ok());
  EXPECT_EQ(layers.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layers.status().message().find("model.sequential.layer[0]"), absl::string_view::npos) << layers.status();
}

TEST(KerasLayersTest, LayerNamesAreEscapedInTheJson) {
  TrainingJob job = Load("examples/fashion_mnist_mlp.pbtxt");
  job.mutable_model()->mutable_sequential()->mutable_layer(0)->set_name("a\"b\\c");
  auto layers = KerasLayers(job);
  ASSERT_TRUE(layers.ok()) << layers.status();
  EXPECT_NE((*layers)[0].config_json.find("\"a\\\"b\\\\c\""), std::string::npos) << (*layers)[0].config_json;
}

TEST(OnnxExportTest, MlpDropsDropoutAndKeepsTheTrainedWeights) {
  std::map<std::string, Tensor> values;
  auto model = Onnx(Load("examples/fashion_mnist_mlp.pbtxt"), &values);
  ASSERT_TRUE(model.ok()) << model.status();
  std::multiset<std::string> ops;
  for (const auto& n : model->graph().node()) ops.insert(n.op_type());
  EXPECT_EQ(ops.count("Dropout"), 0u);
  EXPECT_EQ(ops.count("MatMul"), 3u);
  EXPECT_EQ(ops.count("Add"), 3u);
  EXPECT_EQ(ops.count("Relu"), 2u);
  EXPECT_EQ(ops.count("Softmax"), 0u);  // the examples' last layer is linear
  ASSERT_EQ(model->graph().input_size(), 1);
  EXPECT_EQ(model->graph().input(0).name(), "image");
  ASSERT_EQ(model->graph().output_size(), 1);
  EXPECT_EQ(model->graph().output(0).name(), "output");
  EXPECT_EQ(model->opset_import(0).version(), 13);
  // The second dense layer reads the first's ReLU directly: dropout_1 is gone.
  for (const auto& n : model->graph().node()) {
    if (n.name() == "dense_3/matmul") {
      EXPECT_EQ(n.input(0), "dense_1/relu");
    }
  }
  for (const auto& t : model->graph().initializer()) {
    if (t.name() != "dense_1/kernel") continue;
    ASSERT_EQ(t.dims_size(), 2);
    EXPECT_EQ(t.dims(0), 784);
    EXPECT_EQ(t.raw_data(), std::string(static_cast<const char*>(values["dense_1/kernel"].raw_data()),
                                        values["dense_1/kernel"].TotalBytes()));
  }
}

// An imported model with BatchNormalization goes out in inference mode:
// each node's running_mean / running_var initializer holds the trained
// moving statistics, training_mode is 0 and its training-only outputs are
// gone.
TEST(OnnxExportTest, ImportedBatchNormGoesOutWithItsMovingStatistics) {
  TrainingJob job = Load("examples/fashion_mnist_onnx_resnet_bn.pbtxt");
  std::map<std::string, Tensor> values;
  absl::StatusOr<onnx::ModelProto> m = Onnx(job, &values);
  ASSERT_TRUE(m.ok()) << m.status();
  int nodes = 0;
  for (const onnx::NodeProto& n : m->graph().node()) {
    if (n.op_type() != "BatchNormalization") continue;
    ++nodes;
    EXPECT_EQ(n.output_size(), 1) << n.name();
    int64_t mode = -1;
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.name() == "training_mode") mode = a.i();
    }
    EXPECT_EQ(mode, 0) << n.name();
  }
  EXPECT_EQ(nodes, 9);
  int running = 0;
  for (const onnx::TensorProto& t : m->graph().initializer()) {
    if (t.name() != "1.running_var" && t.name() != "5.shortcut.1.running_mean") continue;
    ++running;
    ASSERT_EQ(t.raw_data().size(), t.dims(0) * sizeof(float)) << t.name();
    const float* f = reinterpret_cast<const float*>(t.raw_data().data());
    for (int64_t i = 0; i < t.dims(0); ++i) EXPECT_EQ(f[i], static_cast<float>(i)) << t.name();  // Counting's
  }
  EXPECT_EQ(running, 2);
}

TEST(OnnxExportTest, ConvKernelsAreStoredFiltersFirst) {
  auto model = Onnx(Load("examples/fashion_mnist_cnn.pbtxt"));
  ASSERT_TRUE(model.ok()) << model.status();
  bool found = false;
  for (const auto& t : model->graph().initializer()) {
    if (t.name() != "conv2d_2/kernel") continue;
    found = true;
    // psrt: [3, 3, 32, 64] (h, w, in, out); ONNX: [64, 32, 3, 3].
    ASSERT_EQ(t.dims_size(), 4);
    EXPECT_EQ(t.dims(0), 64);
    EXPECT_EQ(t.dims(1), 32);
    const float* oihw = reinterpret_cast<const float*>(t.raw_data().data());
    const int64_t o = 5, i = 7, h = 2, w = 1;
    EXPECT_EQ(oihw[((o * 32 + i) * 3 + h) * 3 + w], static_cast<float>(((h * 3 + w) * 32 + i) * 64 + o));
  }
  EXPECT_TRUE(found);
  int convs = 0;
  for (const auto& n : model->graph().node()) {
    if (n.op_type() != "Conv") continue;
    ++convs;
    for (const auto& a : n.attribute()) {
      if (a.name() == "auto_pad") {
        EXPECT_EQ(a.s(), "SAME_UPPER");
      }
    }
  }
  EXPECT_EQ(convs, 2);
}

TEST(OnnxExportTest, AFinalSoftmaxFoldedIntoTheLossIsAppliedAgain) {
  TrainingJob job = Load("examples/fashion_mnist_mlp.pbtxt");
  auto* last = job.mutable_model()->mutable_sequential()->mutable_layer(5)->mutable_dense();
  last->set_activation(SOFTMAX);
  auto model = Onnx(job);
  ASSERT_TRUE(model.ok()) << model.status();
  int softmax = 0;
  for (const auto& n : model->graph().node()) softmax += n.op_type() == "Softmax";
  EXPECT_EQ(softmax, 1);
}

TEST(OnnxExportTest, EmbeddingModelIsRefusedNamingTheLayer) {
  auto model = Onnx(Load("examples/sparse_libsvm.pbtxt"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("EmbeddingBag"), absl::string_view::npos) << model.status();
}

}  // namespace
}  // namespace psrt
