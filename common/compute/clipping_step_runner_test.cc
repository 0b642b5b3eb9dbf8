#include "common/compute/clipping_step_runner.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/compute/gradient_clipping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

Tensor T(std::vector<float> v, TensorShape shape) { return Tensor::FromVector(v, std::move(shape)); }
Tensor V(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return T(std::move(v), TensorShape({n}));
}
std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.span<float>().begin(), t.span<float>().end());
}

GradientClipping Clip(float clipnorm, float clipvalue, float global_clipnorm) {
  GradientClipping c;
  c.set_clipnorm(clipnorm);
  c.set_clipvalue(clipvalue);
  c.set_global_clipnorm(global_clipnorm);
  return c;
}

// Two dense gradients, made by the backward pass in the order "b", "a"
// (last layers first), and one sparse one: ids {7, 2}, rows [2, 2]. Each
// step's events go to `log`: "made v" as the backward pass finishes v.
class FakeRunner : public StepRunner {
 public:
  explicit FakeRunner(std::vector<std::string>* log) : log_(log) {}
  std::vector<std::string> DenseVariables() const override { return {"a", "b"}; }
  absl::StatusOr<RowRequest> SparseRows(const Batch&) const override { return RowRequest{}; }
  absl::StatusOr<StepResult> Run(const TensorMap&, const TensorMap&, const Batch&, int64_t) override {
    StepResult r = Result();
    r.dense_gradients["a"] = a;
    r.dense_gradients["b"] = b;
    return r;
  }
  absl::StatusOr<StepResult> RunStreaming(const TensorMap&, const TensorMap&, const Batch&, int64_t,
                                          const GradientReady& ready) override {
    log_->push_back("made b");
    ready("b", b);
    log_->push_back("made a");
    ready("a", a);
    return Result();
  }
  std::string device() const override { return "fake"; }

  Tensor a = V({3, 0});                                 // norm 3
  Tensor b = V({0, -4});                                // norm 4
  Tensor rows = T({0, 12, 0, 0}, TensorShape({2, 2}));  // norm 12; all three: 13
  Tensor ids = Tensor::FromVector<int64_t>({7, 2}, TensorShape({2}));

 private:
  StepResult Result() const {
    StepResult r;
    r.loss = 0.5f;
    r.sparse_gradients["emb"] = {ids, rows};
    r.metrics["accuracy"] = 0.25f;
    return r;
  }
  std::vector<std::string>* const log_;
};

struct Streamed {
  std::vector<std::string> log;
  TensorMap dense;
  StepResult result;
};

Streamed RunStreamingWith(const GradientClipping& clip) {
  Streamed out;
  auto runner = MaybeClipGradients(std::make_unique<FakeRunner>(&out.log), clip);
  absl::StatusOr<StepResult> r = runner->RunStreaming({}, {}, Batch{}, 3, [&](const std::string& v, const Tensor& g) {
    out.log.push_back("ready " + v);
    out.dense[v] = g;
  });
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) out.result = *std::move(r);
  return out;
}

TEST(ClippingStepRunnerTest, OffIsNoWrapperAndTouchesNothing) {
  std::vector<std::string> log;
  auto inner = std::make_unique<FakeRunner>(&log);
  StepRunner* raw = inner.get();
  auto runner = MaybeClipGradients(std::move(inner), GradientClipping());
  EXPECT_EQ(runner.get(), raw);

  FakeRunner fake(&log);
  absl::StatusOr<StepResult> r = fake.Run({}, {}, Batch{}, 0);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(ClipStepGradients(GradientClipping(), &*r).ok());
  EXPECT_TRUE(r->dense_gradients.at("a").SharesBufferWith(fake.a));
  EXPECT_TRUE(r->sparse_gradients.at("emb").second.SharesBufferWith(fake.rows));
}

TEST(ClippingStepRunnerTest, ClipnormScalesEachTensorToItsBound) {
  std::vector<std::string> log;
  auto runner = MaybeClipGradients(std::make_unique<FakeRunner>(&log), Clip(3.5f, 0, 0));
  absl::StatusOr<StepResult> r = runner->Run({}, {}, Batch{}, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  // a (norm 3) is within the bound: the same tensor, no copy.
  EXPECT_THAT(Values(r->dense_gradients.at("a")), ElementsAre(3, 0));
  EXPECT_THAT(Values(r->dense_gradients.at("b")), Pointwise(FloatNear(1e-6), std::vector<float>{0, -3.5f}));
  // Sparse: the rows' norm, the ids as they were.
  const auto& [ids, rows] = r->sparse_gradients.at("emb");
  EXPECT_THAT(ids.span<int64_t>(), ElementsAre(7, 2));
  EXPECT_EQ(rows.shape(), TensorShape({2, 2}));
  EXPECT_THAT(Values(rows), Pointwise(FloatNear(1e-6), std::vector<float>{0, 3.5f, 0, 0}));
  EXPECT_EQ(r->loss, 0.5f);
  EXPECT_EQ(r->metrics.at("accuracy"), 0.25f);
}

TEST(ClippingStepRunnerTest, ClipvalueClipsEachElement) {
  std::vector<std::string> log;
  auto runner = MaybeClipGradients(std::make_unique<FakeRunner>(&log), Clip(0, 3.25f, 0));
  absl::StatusOr<StepResult> r = runner->Run({}, {}, Batch{}, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(Values(r->dense_gradients.at("a")), ElementsAre(3, 0));
  EXPECT_THAT(Values(r->dense_gradients.at("b")), ElementsAre(0, -3.25f));
  EXPECT_THAT(Values(r->sparse_gradients.at("emb").second), ElementsAre(0, 3.25f, 0, 0));
}

TEST(ClippingStepRunnerTest, GlobalClipnormScalesAllTogetherSparseRowsIncluded) {
  std::vector<std::string> log;
  auto runner = MaybeClipGradients(std::make_unique<FakeRunner>(&log), Clip(0, 0, 6.5f));
  absl::StatusOr<StepResult> r = runner->Run({}, {}, Batch{}, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  // Global norm sqrt(9 + 16 + 144) = 13: everything halved.
  EXPECT_THAT(Values(r->dense_gradients.at("a")), Pointwise(FloatNear(1e-6), std::vector<float>{1.5f, 0}));
  EXPECT_THAT(Values(r->dense_gradients.at("b")), Pointwise(FloatNear(1e-6), std::vector<float>{0, -2}));
  EXPECT_THAT(Values(r->sparse_gradients.at("emb").second), Pointwise(FloatNear(1e-6), std::vector<float>{0, 6, 0, 0}));
}

TEST(ClippingStepRunnerTest, WithinEveryBoundNothingIsCopied) {
  for (const GradientClipping& clip : {Clip(12, 0, 0), Clip(0, 12, 0), Clip(0, 0, 13)}) {
    std::vector<std::string> log;
    FakeRunner fake(&log);
    absl::StatusOr<StepResult> r = fake.Run({}, {}, Batch{}, 0);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(ClipStepGradients(clip, &*r).ok());
    EXPECT_TRUE(r->dense_gradients.at("a").SharesBufferWith(fake.a)) << clip.ShortDebugString();
    EXPECT_TRUE(r->dense_gradients.at("b").SharesBufferWith(fake.b)) << clip.ShortDebugString();
    EXPECT_TRUE(r->sparse_gradients.at("emb").second.SharesBufferWith(fake.rows)) << clip.ShortDebugString();
  }
}

TEST(ClippingStepRunnerTest, PerTensorClippingKeepsStreaming) {
  for (const GradientClipping& clip : {Clip(3.5f, 0, 0), Clip(0, 3.25f, 0)}) {
    const float bound = clip.clipnorm() + clip.clipvalue();  // the one set; b and emb exceed it
    Streamed s = RunStreamingWith(clip);
    // Each gradient leaves as soon as the backward pass has made it.
    EXPECT_THAT(s.log, ElementsAre("made b", "ready b", "made a", "ready a")) << clip.ShortDebugString();
    EXPECT_TRUE(s.result.dense_gradients.empty());
    EXPECT_THAT(Values(s.dense.at("b")), Pointwise(FloatNear(1e-6), std::vector<float>{0, -bound}));
    EXPECT_THAT(Values(s.dense.at("a")), ElementsAre(3, 0));
    EXPECT_THAT(Values(s.result.sparse_gradients.at("emb").second),
                Pointwise(FloatNear(1e-6), std::vector<float>{0, bound, 0, 0}));
  }
}

TEST(ClippingStepRunnerTest, GlobalClipnormHoldsEveryGradientUntilTheStepEnds) {
  Streamed s = RunStreamingWith(Clip(0, 0, 6.5f));
  // Nothing leaves before the last gradient is made; then all, in the
  // backward pass's order.
  EXPECT_THAT(s.log, ElementsAre("made b", "made a", "ready b", "ready a"));
  EXPECT_TRUE(s.result.dense_gradients.empty());
  EXPECT_THAT(Values(s.dense.at("a")), Pointwise(FloatNear(1e-6), std::vector<float>{1.5f, 0}));
  EXPECT_THAT(Values(s.dense.at("b")), Pointwise(FloatNear(1e-6), std::vector<float>{0, -2}));
  EXPECT_THAT(Values(s.result.sparse_gradients.at("emb").second),
              Pointwise(FloatNear(1e-6), std::vector<float>{0, 6, 0, 0}));
}

// A moving-average variable's value (a batch statistic, not a gradient:
// VariableDef.moving_average in the assignment's placement) passes every
// kind of clipping as it is and stays out of the global norm.
TEST(ClippingStepRunnerTest, MovingAverageValuesAreNeitherClippedNorCounted) {
  WorkerAssignment a;
  VariableDef* b = a.mutable_placement()->add_variable()->mutable_variable();
  b->set_name("b");
  b->mutable_moving_average()->set_momentum(0.9f);
  a.mutable_placement()->add_variable()->mutable_variable()->set_name("a");
  for (const GradientClipping& clip : {Clip(3.5f, 0, 0), Clip(0, 3.25f, 0), Clip(0, 0, 6.5f)}) {
    *a.mutable_clip() = clip;
    std::vector<std::string> log;
    auto runner = MaybeClipGradients(std::make_unique<FakeRunner>(&log), a);
    absl::StatusOr<StepResult> r = runner->Run({}, {}, Batch{}, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(Values(r->dense_gradients.at("b")), ElementsAre(0, -4)) << clip.ShortDebugString();
    if (clip.global_clipnorm() > 0) {
      // The norm of a and emb alone, sqrt(9 + 144).
      const float scale = 6.5f / std::sqrt(153.0f);
      EXPECT_THAT(Values(r->dense_gradients.at("a")), Pointwise(FloatNear(1e-5), std::vector<float>{3 * scale, 0}));
      Streamed s;
      auto streaming = MaybeClipGradients(std::make_unique<FakeRunner>(&s.log), a);
      ASSERT_TRUE(streaming->RunStreaming({}, {}, Batch{}, 3, [&](const std::string& v, const Tensor& g) { s.dense[v] = g; }).ok());
      EXPECT_THAT(Values(s.dense.at("b")), ElementsAre(0, -4));
      EXPECT_THAT(Values(s.dense.at("a")), Pointwise(FloatNear(1e-5), std::vector<float>{3 * scale, 0}));
    }
  }
}

TEST(ClippingStepRunnerTest, NonFiniteGlobalNormGivesNaNAsTensorFlow) {
  std::vector<std::string> log;
  FakeRunner fake(&log);
  absl::StatusOr<StepResult> r = fake.Run({}, {}, Batch{}, 0);
  ASSERT_TRUE(r.ok());
  r->dense_gradients["a"] = V({std::numeric_limits<float>::infinity(), 0});
  ASSERT_TRUE(ClipStepGradients(Clip(0, 0, 1), &*r).ok());
  for (float x : Values(r->dense_gradients.at("b"))) EXPECT_TRUE(std::isnan(x));
  for (float x : Values(r->sparse_gradients.at("emb").second)) EXPECT_TRUE(std::isnan(x));
}

TEST(ClippingStepRunnerTest, ANonFloatGradientIsRefusedNamingIt) {
  StepResult r;
  r.dense_gradients["counts"] = Tensor::FromVector<int64_t>({5}, TensorShape({1}));
  for (const GradientClipping& clip : {Clip(1, 0, 0), Clip(0, 1, 0), Clip(0, 0, 1)}) {
    absl::Status s = ClipStepGradients(clip, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << clip.ShortDebugString();
    EXPECT_THAT(s.message(), HasSubstr("float")) << clip.ShortDebugString();
  }
  EXPECT_THAT(ClipStepGradients(Clip(1, 0, 0), &r).message(), HasSubstr("counts"));
}

TEST(GradientClippingTest, ClippingOfCopiesTheOptimizersFields) {
  OptimizerDef o;
  o.mutable_adam()->set_learning_rate(0.001f);
  o.set_global_clipnorm(1.5f);
  const GradientClipping c = ClippingOf(o);
  EXPECT_EQ(c.global_clipnorm(), 1.5f);
  EXPECT_EQ(c.clipnorm(), 0);
  EXPECT_EQ(c.clipvalue(), 0);
  EXPECT_TRUE(ClippingEnabled(c));
  EXPECT_FALSE(ClippingEnabled(ClippingOf(OptimizerDef())));
}

TEST(GradientClippingTest, CheckClippingNamesTheField) {
  EXPECT_TRUE(CheckClipping(GradientClipping(), "optimizer").ok());
  EXPECT_TRUE(CheckClipping(Clip(1, 0, 0), "optimizer").ok());
  EXPECT_TRUE(CheckClipping(Clip(0, 0, 0.5f), "optimizer").ok());
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    GradientClipping clip;
    std::string field;
  };
  for (const Case& c :
       {Case{Clip(-1, 0, 0), "optimizer.clipnorm: "}, Case{Clip(0, nan, 0), "optimizer.clipvalue: "},
        Case{Clip(0, 0, inf), "optimizer.global_clipnorm: "}, Case{Clip(0, -inf, 0), "optimizer.clipvalue: "},
        Case{Clip(1, 2, 0), "optimizer.clipvalue: set with optimizer.clipnorm"},
        Case{Clip(0, 2, 3), "optimizer.global_clipnorm: set with optimizer.clipvalue"}}) {
    absl::Status s = CheckClipping(c.clip, "optimizer");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace psrt
