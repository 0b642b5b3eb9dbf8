// Each rule against values worked out by hand from the published update
// equations, two steps from var = 1 with gradient 0.5.
#include "common/optimizer.h"

#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Optimizer> Make(const std::string& text) {
  OptimizerDef def;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &def)) << text;
  auto o = Optimizer::Create(def);
  EXPECT_TRUE(o.ok()) << o.status();
  return *std::move(o);
}

// Two steps on 3 elements (all start at 1, gradient 0.5); returns the
// variable after each step (all elements must agree).
std::vector<float> TwoSteps(const Optimizer& opt) {
  std::vector<float> var(3, 1.0f), grad(3, 0.5f);
  std::vector<std::vector<float>> slots;
  for (int i = 0; i < opt.num_slots(); ++i) slots.emplace_back(3, opt.slot_initial_value(i));
  std::vector<float*> ptrs;
  for (auto& s : slots) ptrs.push_back(s.data());
  std::vector<float> out;
  for (int t = 1; t <= 2; ++t) {
    opt.Apply(var.data(), grad.data(), 3, ptrs.data(), t);
    EXPECT_EQ(var[0], var[2]);
    out.push_back(var[0]);
  }
  return out;
}

TEST(OptimizerTest, Sgd) {
  auto o = Make("sgd { learning_rate: 0.1 }");
  EXPECT_THAT(TwoSteps(*o), testing::ElementsAre(testing::FloatNear(0.95f, 1e-6), testing::FloatNear(0.9f, 1e-6)));
}

TEST(OptimizerTest, MomentumAndNesterov) {
  // accum = 0.5 -> var 0.95; accum = 0.9*0.5+0.5 = 0.95 -> var 0.855.
  EXPECT_THAT(TwoSteps(*Make("momentum { learning_rate: 0.1 momentum: 0.9 }")),
              testing::ElementsAre(testing::FloatNear(0.95f, 1e-6), testing::FloatNear(0.855f, 1e-6)));
  // Nesterov: var -= 0.1*(0.5 + 0.9*0.5) = 0.095 -> 0.905; then 0.1*(0.5+0.855) -> 0.7695.
  EXPECT_THAT(TwoSteps(*Make("momentum { learning_rate: 0.1 momentum: 0.9 nesterov: true }")),
              testing::ElementsAre(testing::FloatNear(0.905f, 1e-6), testing::FloatNear(0.7695f, 1e-6)));
}

TEST(OptimizerTest, Adagrad) {
  // accum = 0.1 + 0.25 = 0.35; var = 1 - 0.1*0.5/sqrt(0.35).
  auto v = TwoSteps(*Make("adagrad { learning_rate: 0.1 }"));
  EXPECT_NEAR(v[0], 0.9154846f, 1e-6);
  EXPECT_NEAR(v[1], 0.9154846f - 0.05f / std::sqrt(0.6f), 1e-6);
}

TEST(OptimizerTest, AdamWithBiasCorrection) {
  // With a constant gradient the corrected step is lr: 0.9, then 0.8.
  auto v = TwoSteps(*Make("adam { learning_rate: 0.1 }"));
  EXPECT_NEAR(v[0], 0.90000063f, 1e-6);
  EXPECT_NEAR(v[1], 0.80000108f, 1e-6);
}

TEST(OptimizerTest, AdamWDecaysBeforeAdamsStep) {
  // Keras' default weight_decay 0.004: var = 1 - 1*0.004*0.1 = 0.9996, then
  // Adam's step: m = 0.05, v = 0.00025, alpha = 0.1*sqrt(0.001)/0.1,
  // step = 0.05*alpha/(sqrt(0.00025)+1e-7) = 0.0999993675 -> 0.8996006325.
  // Step 2: 0.8996006325*(1-0.0004) = 0.8992407922, m = 0.095,
  // v = 0.00049975, alpha = 0.1*sqrt(0.001999)/0.19,
  // step = 0.0999995527 -> 0.7992412395.
  auto v = TwoSteps(*Make("adamw { learning_rate: 0.1 }"));
  EXPECT_NEAR(v[0], 0.8996006325f, 1e-6);
  EXPECT_NEAR(v[1], 0.7992412395f, 1e-6);
  // weight_decay 0.1: 1 - 0.01 = 0.99 - 0.0999993675 = 0.8900006325, then
  // 0.8900006325*0.99 - 0.0999995527 = 0.7811010735.
  v = TwoSteps(*Make("adamw { learning_rate: 0.1 weight_decay: 0.1 }"));
  EXPECT_NEAR(v[0], 0.8900006325f, 1e-6);
  EXPECT_NEAR(v[1], 0.7811010735f, 1e-6);
  // weight_decay set to 0 is Adam (unset is 0.004).
  EXPECT_EQ(TwoSteps(*Make("adamw { learning_rate: 0.1 weight_decay: 0 }")),
            TwoSteps(*Make("adam { learning_rate: 0.1 }")));
}

TEST(OptimizerTest, Rmsprop) {
  // velocity = 0.1*0.25 = 0.025; var -= 0.1*0.5/sqrt(0.025+1e-7) = 0.3162271
  // -> 0.6837729. Step 2: velocity = 0.9*0.025+0.025 = 0.0475,
  // var -= 0.05/sqrt(0.0475001) = 0.2294155 -> 0.4543574.
  auto v = TwoSteps(*Make("rmsprop { learning_rate: 0.1 }"));
  EXPECT_NEAR(v[0], 0.6837729f, 1e-6);
  EXPECT_NEAR(v[1], 0.4543574f, 1e-6);
  // Centered: average_gradient = 0.05, denominator = 0.025-0.0025+1e-7,
  // var -= 0.05/0.15000033 -> 0.6666674. Step 2: average 0.095,
  // denominator = 0.0475-0.009025+1e-7 = 0.0384751, var -= 0.2549061 -> 0.4117614.
  v = TwoSteps(*Make("rmsprop { learning_rate: 0.1 centered: true }"));
  EXPECT_NEAR(v[0], 0.6666674f, 1e-6);
  EXPECT_NEAR(v[1], 0.4117614f, 1e-6);
  // Momentum 0.9: the first step is the plain one; the second moves by
  // 0.9*0.3162271 + 0.2294155 = 0.5140199 -> 0.1697530.
  v = TwoSteps(*Make("rmsprop { learning_rate: 0.1 momentum: 0.9 }"));
  EXPECT_NEAR(v[0], 0.6837729f, 1e-6);
  EXPECT_NEAR(v[1], 0.1697530f, 1e-6);
  // Both: 0.9*0.3333326 + 0.2549061 = 0.5549054 -> 0.1117620.
  v = TwoSteps(*Make("rmsprop { learning_rate: 0.1 momentum: 0.9 centered: true }"));
  EXPECT_NEAR(v[0], 0.6666674f, 1e-6);
  EXPECT_NEAR(v[1], 0.1117620f, 1e-6);
  // rho 0.5: velocity = 0.125, var -= 0.05/sqrt(0.1250001) -> 0.8585787.
  EXPECT_NEAR(TwoSteps(*Make("rmsprop { learning_rate: 0.1 rho: 0.5 }"))[0], 0.8585787f, 1e-6);
}

TEST(OptimizerTest, AdamWAndRmspropFollowTheSchedule) {
  // STEP halves the rate at update 2: RMSprop's second step is half of
  // 0.2294155; AdamW's decay uses the scheduled rate too.
  auto v = TwoSteps(*Make("rmsprop { learning_rate: 0.1 } schedule { kind: STEP decay_steps: 2 decay_rate: 0.5 }"));
  EXPECT_NEAR(v[1], 0.6837729f - 0.1147078f, 1e-6);
  v = TwoSteps(*Make("adamw { learning_rate: 0.1 weight_decay: 0.1 } schedule { kind: STEP decay_steps: 2 decay_rate: 0.5 }"));
  EXPECT_NEAR(v[1], 0.8900006325f * (1 - 0.1f * 0.05f) - 0.0999995527f / 2, 1e-6);
}

TEST(OptimizerTest, FtrlProximal) {
  auto v = TwoSteps(*Make("ftrl { learning_rate: 0.1 l1: 0.01 l2: 0.02 }"));
  EXPECT_NEAR(v[0], 0.37672466f, 1e-6);
  EXPECT_NEAR(v[1], 0.31250656f, 1e-6);
}

TEST(OptimizerTest, FtrlL1DrivesSmallWeightsToExactZero) {
  auto o = Make("ftrl { learning_rate: 0.1 l1: 10 }");
  std::vector<float> var = {1.0f}, grad = {0.5f}, acc = {0.1f}, lin = {0.0f};
  float* slots[] = {acc.data(), lin.data()};
  o->Apply(var.data(), grad.data(), 1, slots, 1);
  EXPECT_EQ(var[0], 0.0f);
}

TEST(OptimizerTest, SlotsAndNames) {
  EXPECT_EQ(Make("adam { learning_rate: 0.1 }")->slot_names(), (std::vector<std::string>{"m", "v"}));
  EXPECT_EQ(Make("sgd { learning_rate: 0.1 }")->num_slots(), 0);
  EXPECT_EQ(Make("adagrad { learning_rate: 0.1 initial_accumulator: 0.5 }")->slot_initial_value(0), 0.5f);
  EXPECT_EQ(Make("adamw { learning_rate: 0.1 }")->slot_names(), (std::vector<std::string>{"m", "v"}));
  EXPECT_EQ(Make("adamw { learning_rate: 0.1 }")->name(), "adamw");
  EXPECT_EQ(Make("rmsprop { learning_rate: 0.1 }")->slot_names(), (std::vector<std::string>{"velocity"}));
  EXPECT_EQ(Make("rmsprop { learning_rate: 0.1 centered: true }")->slot_names(),
            (std::vector<std::string>{"velocity", "average_gradient"}));
  EXPECT_EQ(Make("rmsprop { learning_rate: 0.1 momentum: 0.5 }")->slot_names(),
            (std::vector<std::string>{"velocity", "momentum"}));
  EXPECT_EQ(Make("rmsprop { learning_rate: 0.1 momentum: 0.5 centered: true }")->slot_names(),
            (std::vector<std::string>{"velocity", "momentum", "average_gradient"}));
}

TEST(OptimizerTest, RefusesBadDefinitions) {
  auto err = [](const std::string& text) {
    OptimizerDef def;
    google::protobuf::TextFormat::ParseFromString(text, &def);
    return std::string(Optimizer::Create(def).status().message());
  };
  EXPECT_THAT(err(""), HasSubstr("none given"));
  EXPECT_THAT(err("sgd { learning_rate: 0 }"), HasSubstr("optimizer.sgd.learning_rate must be positive"));
  EXPECT_THAT(err("adam { learning_rate: 0.1 beta1: 1.5 }"), HasSubstr("optimizer.adam.beta1"));
  EXPECT_THAT(err("momentum { learning_rate: 0.1 momentum: -1 }"), HasSubstr("momentum.momentum"));
  EXPECT_THAT(err("ftrl { learning_rate: 0.1 l1: -1 }"), HasSubstr("l1 and l2"));
  EXPECT_THAT(err("adam { learning_rate: 0.1 beta2: nan }"), HasSubstr("optimizer.adam.beta2"));

  EXPECT_THAT(err("adamw { }"), HasSubstr("optimizer.adamw.learning_rate must be positive"));
  EXPECT_THAT(err("adamw { learning_rate: inf }"), HasSubstr("optimizer.adamw.learning_rate"));
  EXPECT_THAT(err("adamw { learning_rate: 0.1 beta1: 1 }"), HasSubstr("optimizer.adamw.beta1"));
  EXPECT_THAT(err("adamw { learning_rate: 0.1 beta2: -0.5 }"), HasSubstr("optimizer.adamw.beta2"));
  EXPECT_THAT(err("adamw { learning_rate: 0.1 epsilon: -1e-8 }"), HasSubstr("optimizer.adamw.epsilon"));
  EXPECT_THAT(err("adamw { learning_rate: 0.1 weight_decay: -0.01 }"), HasSubstr("optimizer.adamw.weight_decay"));
  EXPECT_THAT(err("adamw { learning_rate: 0.1 weight_decay: nan }"), HasSubstr("optimizer.adamw.weight_decay"));

  EXPECT_THAT(err("rmsprop { learning_rate: -1 }"), HasSubstr("optimizer.rmsprop.learning_rate must be positive"));
  EXPECT_THAT(err("rmsprop { learning_rate: 0.1 rho: 1 }"), HasSubstr("optimizer.rmsprop.rho"));
  EXPECT_THAT(err("rmsprop { learning_rate: 0.1 momentum: 1.5 }"), HasSubstr("optimizer.rmsprop.momentum"));
  EXPECT_THAT(err("rmsprop { learning_rate: 0.1 momentum: -0.1 }"), HasSubstr("optimizer.rmsprop.momentum"));
  EXPECT_THAT(err("rmsprop { learning_rate: 0.1 epsilon: -1 }"), HasSubstr("optimizer.rmsprop.epsilon"));
  EXPECT_THAT(err("rmsprop { learning_rate: 0.1 epsilon: inf }"), HasSubstr("optimizer.rmsprop.epsilon"));
  // Every refusal is INVALID_ARGUMENT.
  OptimizerDef def;
  def.mutable_rmsprop()->set_learning_rate(0.1f);
  def.mutable_rmsprop()->set_rho(2);
  EXPECT_EQ(Optimizer::Create(def).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OptimizerTest, LearningRateSchedules) {
  auto constant = Make("adam { learning_rate: 0.01 }");
  EXPECT_FLOAT_EQ(constant->LearningRate(1), 0.01f);
  EXPECT_FLOAT_EQ(constant->LearningRate(1000000), 0.01f);

  auto warm_cosine = Make("sgd { learning_rate: 1 } schedule { kind: COSINE warmup_steps: 10 decay_steps: 100 min_fraction: 0.1 }");
  EXPECT_FLOAT_EQ(warm_cosine->LearningRate(1), 0.1f);   // 1/10 of the way up
  EXPECT_FLOAT_EQ(warm_cosine->LearningRate(5), 0.5f);
  EXPECT_FLOAT_EQ(warm_cosine->LearningRate(10), 1.0f);  // the top
  EXPECT_NEAR(warm_cosine->LearningRate(60), 0.55f, 1e-6);  // half way down to 0.1
  EXPECT_FLOAT_EQ(warm_cosine->LearningRate(110), 0.1f);
  EXPECT_FLOAT_EQ(warm_cosine->LearningRate(1000), 0.1f);  // stays at the floor

  auto step = Make("sgd { learning_rate: 1 } schedule { kind: STEP decay_steps: 10 decay_rate: 0.5 }");
  EXPECT_FLOAT_EQ(step->LearningRate(9), 1.0f);
  EXPECT_FLOAT_EQ(step->LearningRate(10), 0.5f);
  EXPECT_FLOAT_EQ(step->LearningRate(25), 0.25f);
  // The rate the rule applies is the scheduled one.
  EXPECT_THAT(TwoSteps(*Make("sgd { learning_rate: 0.1 } schedule { kind: STEP decay_steps: 2 decay_rate: 0.5 }")),
              testing::ElementsAre(testing::FloatNear(0.95f, 1e-6), testing::FloatNear(0.925f, 1e-6)));
}

TEST(OptimizerTest, ScheduleOverTheWholeJobAndBadSchedules) {
  OptimizerDef def;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString("adam { learning_rate: 0.001 } schedule { kind: COSINE warmup_steps: 100 }", &def));
  EXPECT_EQ(Optimizer::Create(def).status().code(), absl::StatusCode::kInvalidArgument);  // decay_steps 0: not resolved
  OptimizerDef resolved = ResolveSchedule(def, 14070);
  EXPECT_EQ(resolved.schedule().decay_steps(), 13970);
  EXPECT_TRUE(Optimizer::Create(resolved).ok());
  EXPECT_FALSE(ResolveSchedule(*std::make_unique<OptimizerDef>(), 10).has_schedule());
  for (const char* bad : {"sgd { learning_rate: 1 } schedule { kind: STEP decay_steps: 10 decay_rate: 1.5 }",
                          "sgd { learning_rate: 1 } schedule { kind: COSINE decay_steps: 10 min_fraction: 1 }",
                          "sgd { learning_rate: 1 } schedule { warmup_steps: -1 }"}) {
    OptimizerDef d;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(bad, &d));
    EXPECT_EQ(Optimizer::Create(d).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace psrt
