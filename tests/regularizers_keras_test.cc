// Keras' kernel_regularizer / bias_regularizer (LayerDef.kernel_regularizer,
// bias_regularizer) against Keras 3's own: the job's model compiled as a
// worker runs it, its loss and every variable's gradient on a fixed batch,
// next to model.compute_loss (which adds model.losses) under
// tf.GradientTape (real TensorFlow 2.21, the test-only venv-tf). Also: what
// cannot be regularized is refused naming the layer, and the .keras export
// carries the regularizers (Keras loads it and computes the same loss).
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/export_formats/keras_saving.h"
#include "common/compute/executor.h"
#include "common/compute/op_test_util.h"
#include "common/graph/model_compiler.h"
#include "common/testing/python_tool.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 8, kUnits = 4;

TrainingJob Job(const std::string& layers) {
  TrainingJob job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(absl::StrCat(R"pb(model { sequential {)pb", layers,
                                                                         R"pb(}
                                                                              loss { kind: SOFTMAX_CROSS_ENTROPY } }
                   input { num_classes: 4 feature { name: "image" shape: [ 6, 6, 1 ] } })pb"),
                                                            &job));
  return job;
}

struct Regs {
  float v[8];  // l1, l2 of: conv kernel, conv bias, dense kernel, dense bias
};

std::string RegText(const char* field, float l1, float l2) {
  if (l1 == 0 && l2 == 0) return "";
  return absl::StrCat(field, " { l1: ", l1, " l2: ", l2, " } ");
}

TEST(RegularizersKerasTest, LossAndGradientsMatchKeras) {
  std::mt19937 rng(11);
  const std::vector<Regs> cases = {
      {{0, 0.01f, 0.02f, 0, 0.003f, 0.004f, 0, 0.05f}},  // l2, l1, l1_l2, l2
      {{0.05f, 0.1f, 0, 0, 0, 0, 0.2f, 0}},              // heavy enough to dominate the loss
      {{0, 0, 0, 0, 0, 0, 0, 0}},                        // none: the plain loss
  };
  double worst = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Regs& r = cases[ci];
    SCOPED_TRACE(absl::StrCat("case ", ci));
    TrainingJob job = Job(absl::StrCat("layer { ", RegText("kernel_regularizer", r.v[0], r.v[1]),
                                       RegText("bias_regularizer", r.v[2], r.v[3]),
                                       "conv2d { filters: 3 kernel_size: 3 padding: VALID "
                                       "activation: RELU } } layer { flatten {} } layer { ",
                                       RegText("kernel_regularizer", r.v[4], r.v[5]),
                                       RegText("bias_regularizer", r.v[6], r.v[7]), "dense { units: ", kUnits, " } }"));
    auto model = CompileModel(job);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_EQ(model->variables.size(), 4u);

    std::map<std::string, Tensor> feeds;
    feeds["image"] = RandomTensor(TensorShape({kBatch, 6, 6, 1}), &rng, -1, 1);
    Tensor labels(DT_INT64, TensorShape({kBatch}));
    for (int i = 0; i < kBatch; ++i) labels.data<int64_t>()[i] = static_cast<int64_t>(rng() % kUnits);
    feeds["label"] = labels;
    std::vector<std::string> fetches = {model->loss};
    for (const VariableDef& v : model->variables) {
      std::vector<int64_t> dims(v.shape().dim().begin(), v.shape().dim().end());
      feeds[v.name()] = RandomTensor(TensorShape(dims), &rng, -0.5, 0.5);
      fetches.push_back(model->gradients.at(v.name()));
    }
    auto exec = Executor::Create(model->graph, ExecutorOptions{1});
    ASSERT_TRUE(exec.ok()) << exec.status();
    auto out = (*exec)->Run(feeds, fetches, 1, true);
    ASSERT_TRUE(out.ok()) << out.status();

    const std::string dir = std::getenv("TEST_TMPDIR");
    const std::string in = absl::StrCat(dir, "/case", ci, ".txt"), keras_out = absl::StrCat(dir, "/keras", ci, ".txt");
    {
      std::ofstream f(in);
      f.precision(9);
      for (float v : r.v) f << v << " ";
      f << "\n";
      auto write = [&](const Tensor& t) {
        for (int64_t i = 0; i < t.NumElements(); ++i) {
          f << (t.dtype() == DT_INT64 ? static_cast<double>(t.data<int64_t>()[i]) : t.data<float>()[i]) << " ";
        }
        f << "\n";
      };
      write(feeds["image"]);
      write(feeds["label"]);
      for (const VariableDef& v : model->variables) write(feeds[v.name()]);
    }
    // Keras' model built from the same spec, then the one Keras loads from
    // psrt's .keras export of these weights (its regularizers included).
    const std::string archive = absl::StrCat(dir, "/model", ci, ".keras");
    std::map<std::string, Tensor> weights;
    for (const VariableDef& v : model->variables) weights[v.name()] = feeds[v.name()];
    auto zip = KerasArchive(job, weights);
    ASSERT_TRUE(zip.ok()) << zip.status();
    std::ofstream(archive, std::ios::binary) << *zip;
    for (const bool load : {false, true}) {
      SCOPED_TRACE(load ? "loaded from psrt's .keras" : "built by Keras");
      std::vector<std::string> args = {"--input=" + in, "--output=" + keras_out, absl::StrCat("--batch=", kBatch),
                                       absl::StrCat("--units=", kUnits)};
      if (load) args.push_back("--load=" + archive);
      absl::Status s = testing::RunPythonTool("tests/tools/keras_regularizers.py", args, "", testing::kVenvTfPython);
      ASSERT_TRUE(s.ok()) << s;
      std::ifstream keras(keras_out);
      double their_loss = 0;
      keras >> their_loss;
      const double our_loss = (*out)[0].data<float>()[0];
      EXPECT_NEAR(our_loss, their_loss, 1e-5 * (1 + std::fabs(their_loss)));
      worst = std::max(worst, std::fabs(our_loss - their_loss) / (1 + std::fabs(their_loss)));
      for (size_t k = 0; k < model->variables.size(); ++k) {
        const Tensor& g = (*out)[k + 1];
        for (int64_t i = 0; i < g.NumElements(); ++i) {
          double theirs = 0;
          ASSERT_TRUE(keras >> theirs) << "Keras wrote fewer gradient values for " << model->variables[k].name();
          EXPECT_NEAR(g.data<float>()[i], theirs, 1e-6 + 1e-5 * std::fabs(theirs))
              << model->variables[k].name() << " element " << i;
          worst = std::max(worst, std::fabs(g.data<float>()[i] - theirs) / (1e-3 + std::fabs(theirs)));
        }
      }
    }
  }
  std::cout << "FIGURE: regularizers against Keras (l1, l2, l1_l2 on conv and dense kernels and biases): worst "
               "relative difference "
            << worst << std::endl;
}

TEST(RegularizersKerasTest, WhatCannotBeRegularizedIsRefusedNamingTheLayer) {
  auto refused = [](const std::string& layers) {
    auto model = CompileModel(Job(layers));
    EXPECT_FALSE(model.ok());
    return model.ok() ? std::string() : std::string(model.status().message());
  };
  EXPECT_THAT(refused("layer { flatten {} } layer { kernel_regularizer { l2: 0.1 } dropout { rate: 0.5 } } "
                      "layer { dense { units: 4 } }"),
              HasSubstr("model.sequential.layer[1] (dropout_1): kernel_regularizer and bias_regularizer are for dense "
                        "and conv2d layers"));
  EXPECT_THAT(refused("layer { kernel_regularizer { l2: 0.1 } embedding { input_dim: 10 output_dim: 4 } } "
                      "layer { dense { units: 4 } }"),
              HasSubstr("layer[0] (embedding_0): a regularizer of an embedding table is not supported"));
  EXPECT_THAT(refused("layer { flatten {} } layer { kernel_regularizer { l2: -0.1 } dense { units: 4 } }"),
              HasSubstr("layer[1] (dense_1): kernel_regularizer: l1 0 and l2 -0.1 must be finite and >= 0"));
  EXPECT_THAT(refused("layer { flatten {} } layer { kernel_regularizer { l1: inf } dense { units: 4 } }"),
              HasSubstr("must be finite"));
  EXPECT_THAT(refused("layer { flatten {} } layer { bias_regularizer { l2: 0.1 } dense { units: 4 no_bias: true } }"),
              HasSubstr("layer[1] (dense_1): bias_regularizer on a layer with no_bias"));
}

}  // namespace
}  // namespace psrt
