// Keras' optimizer variables from made-up psrt slots: the order Keras 3.15
// saves them in (Adam interleaved per variable, RMSprop grouped by kind),
// SGD's momentum scaled, the refusals, and the .keras file's optimizer
// group. tests/export_test.cc loads real exports with Keras itself.
#include "chief/export_formats/keras_optimizer.h"

#include "absl/strings/match.h"
#include "chief/export_formats/keras_saving.h"
#include "chief/export_formats/testing.h"
#include "common/graph/model_compiler.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// The MLP example with `optimizer` (text format, no schedule).
TrainingJob Mlp(const std::string& optimizer) {
  TrainingJob job = testing::LoadExample("examples/fashion_mnist_mlp.pbtxt");
  job.clear_optimizer();
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(optimizer, job.mutable_optimizer()));
  return job;
}

// Each variable of the job's model with `slots` slots; element 0 of slot k
// of the variable the i-th in name order holds 100 * i + k + 1.
CheckpointSlots Slots(const TrainingJob& job, int slots, int64_t updates = 7) {
  auto m = CompileModel(job);
  EXPECT_TRUE(m.ok()) << m.status();
  CheckpointSlots out;
  out.step = updates;
  int i = 0;
  for (const auto& [name, value] : testing::Counting(*m)) {
    VariableState& s = out.states[name];
    s.def.set_name(name);
    s.value = value;
    s.updates = updates;
    for (int k = 0; k < slots; ++k) {
      Tensor t = Tensor::Zeros(DT_FLOAT, value.shape());
      t.data<float>()[0] = static_cast<float>(100 * i + k + 1);
      s.slots.push_back(t);
    }
    ++i;
  }
  return out;
}

float First(const Tensor& t) { return t.data<float>()[0]; }
float SlotOf(const CheckpointSlots& c, const std::string& variable, int k) {
  return First(c.states.at(variable).slots[k]);
}

// The MLP's trainable variables in Keras' order.
const std::vector<std::string> kOrder = {"dense_1/kernel", "dense_1/bias",   "dense_3/kernel",
                                         "dense_3/bias",   "dense_5/kernel", "dense_5/bias"};

TEST(KerasOptimizerTest, AdamInterleavesMomentumAndVelocityPerVariable) {
  TrainingJob job = Mlp("adam { learning_rate: 0.002 }");
  CheckpointSlots c = Slots(job, 2);
  auto k = KerasOptimizer(job, c);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_EQ(k->variables.size(), 2u + 2 * kOrder.size());
  EXPECT_EQ(k->variables[0].dtype(), DT_INT64);
  EXPECT_EQ(*k->variables[0].data<int64_t>(), 7);
  EXPECT_FLOAT_EQ(First(k->variables[1]), 0.002f);
  for (size_t v = 0; v < kOrder.size(); ++v) {
    EXPECT_EQ(First(k->variables[2 + 2 * v]), SlotOf(c, kOrder[v], 0)) << kOrder[v];
    EXPECT_EQ(First(k->variables[3 + 2 * v]), SlotOf(c, kOrder[v], 1)) << kOrder[v];
  }
  EXPECT_EQ(k->name, "adam");
  EXPECT_TRUE(absl::StrContains(k->compile_config_json, "\"class_name\": \"Adam\"")) << k->compile_config_json;
  EXPECT_TRUE(absl::StrContains(k->compile_config_json, "\"beta_2\": 0.999000013")) << k->compile_config_json;
  EXPECT_TRUE(absl::StrContains(k->compile_config_json, "SparseCategoricalCrossentropy")) << k->compile_config_json;
  EXPECT_TRUE(absl::StrContains(k->compile_config_json, "\"metrics\": [\"accuracy\"]")) << k->compile_config_json;
}

TEST(KerasOptimizerTest, RmspropGroupsItsSlotsByKind) {
  TrainingJob job = Mlp("rmsprop { learning_rate: 0.001 momentum: 0.5 centered: true }");
  CheckpointSlots c = Slots(job, 3);
  auto k = KerasOptimizer(job, c);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_EQ(k->variables.size(), 2u + 3 * kOrder.size());
  const size_t n = kOrder.size();
  for (size_t v = 0; v < n; ++v) {
    EXPECT_EQ(First(k->variables[2 + v]), SlotOf(c, kOrder[v], 0)) << "velocity of " << kOrder[v];
    EXPECT_EQ(First(k->variables[2 + n + v]), SlotOf(c, kOrder[v], 1)) << "momentum of " << kOrder[v];
    EXPECT_EQ(First(k->variables[2 + 2 * n + v]), SlotOf(c, kOrder[v], 2)) << "average_gradient of " << kOrder[v];
  }
}

TEST(KerasOptimizerTest, SgdMomentumIsMinusTheLearningRateTimesPsrtsAccumulator) {
  TrainingJob job = Mlp("momentum { learning_rate: 0.5 momentum: 0.9 nesterov: true }");
  CheckpointSlots c = Slots(job, 1);
  auto k = KerasOptimizer(job, c);
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_EQ(k->variables.size(), 2u + kOrder.size());
  for (size_t v = 0; v < kOrder.size(); ++v) {
    EXPECT_EQ(First(k->variables[2 + v]), -0.5f * SlotOf(c, kOrder[v], 0)) << kOrder[v];
  }
  EXPECT_TRUE(absl::StrContains(k->compile_config_json, "\"nesterov\": true")) << k->compile_config_json;
  // Plain SGD: the count and the rate only.
  TrainingJob sgd = Mlp("sgd { learning_rate: 0.1 }");
  auto plain = KerasOptimizer(sgd, Slots(sgd, 0));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->variables.size(), 2u);
}

TEST(KerasOptimizerTest, WhatKerasCannotCarryOnIsRefusedSayingWhy) {
  struct Case {
    const char* optimizer;
    const char* said;
  };
  for (const Case& c : {Case{"adagrad { learning_rate: 0.1 }", "optimizer adagrad: psrt's update is"},
                        Case{"ftrl { learning_rate: 0.1 }", "optimizer ftrl:"},
                        Case{"adam { learning_rate: 0.1 } schedule { kind: COSINE decay_steps: 10 }",
                             "optimizer adam with a learning-rate schedule"}}) {
    absl::Status s = CheckKerasOptimizer(Mlp(c.optimizer));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.optimizer;
    EXPECT_TRUE(absl::StrContains(s.message(), c.said)) << s;
  }
  EXPECT_TRUE(CheckKerasOptimizer(Mlp("adam { learning_rate: 0.1 } schedule { kind: CONSTANT }")).ok());
  EXPECT_FALSE(CheckKerasOptimizer(Mlp("adam { learning_rate: 0.1 } schedule { warmup_steps: 5 }")).ok());
  TrainingJob smoothed = Mlp("adam { learning_rate: 0.1 }");
  smoothed.mutable_model()->mutable_loss()->set_label_smoothing(0.1f);
  EXPECT_TRUE(absl::StrContains(CheckKerasOptimizer(smoothed).message(), "label_smoothing"))
      << CheckKerasOptimizer(smoothed);
  // One iteration count in Keras: variables updated unequally are refused.
  TrainingJob job = Mlp("adam { learning_rate: 0.1 }");
  CheckpointSlots uneven = Slots(job, 2);
  uneven.states.at("dense_3/bias").updates = 3;
  auto k = KerasOptimizer(job, uneven);
  ASSERT_FALSE(k.ok());
  EXPECT_TRUE(absl::StrContains(k.status().message(), "dense_3/bias has had 3 updates")) << k.status();
}

TEST(KerasOptimizerTest, TheArchiveCarriesCompileConfigAndOptimizerVars) {
  TrainingJob job = Mlp("adam { learning_rate: 0.002 }");
  CheckpointSlots c = Slots(job, 2);
  auto k = KerasOptimizer(job, c);
  ASSERT_TRUE(k.ok()) << k.status();
  auto config = KerasModelConfig(job, k->compile_config_json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(absl::StrContains(*config, "\"compile_config\": {\"optimizer\"")) << *config;
  auto plain = KerasModelConfig(job);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(absl::StrContains(*plain, "compile_config")) << *plain;
  std::map<std::string, Tensor> values;
  for (const auto& [name, s] : c.states) values[name] = s.value;
  auto zip = KerasArchive(job, values, &*k);
  ASSERT_TRUE(zip.ok()) << zip.status();
  EXPECT_TRUE(absl::StrContains(*zip, "\"compile_config\"")) << "config.json is stored uncompressed";
}

}  // namespace
}  // namespace psrt
