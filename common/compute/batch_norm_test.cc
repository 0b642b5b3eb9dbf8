// The CPU BatchNorm kernel's two modes (docs/models.md, "Batch
// normalisation"): a training step normalises with the batch's statistics,
// evaluation with the moving mean and variance given as inputs 3 and 4;
// either way it outputs the batch's mean, biased and unbiased variance (the
// last is what the step reports for the moving variance).
#include <cmath>
#include <random>

#include "common/compute/executor.h"
#include "common/compute/op_test_util.h"
#include "common/graph/graph_builder.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(BatchNormTest, TrainingUsesTheBatchAndEvaluationTheMovingStatistics) {
  constexpr int64_t kRows = 6, kCh = 3;
  GraphDef g;
  GraphBuilder b(&g);
  for (const char* name : {"x", "scale", "offset", "mean", "var"}) {
    const Shape shape = std::string(name) == "x" ? Shape{2, 3, kCh} : Shape{kCh};
    b.Add("Placeholder", name, {}, {{"shape", AttrShape(shape)}, {"dtype", AttrType(DT_FLOAT)}});
  }
  const std::string y = b.Add("BatchNorm", "bn", {"x", "scale", "offset", "mean", "var"}, {{"epsilon", AttrF(1e-3f)}});
  auto cpu = Executor::Create(g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::mt19937 rng(7);
  const Tensor x = RandomTensor(TensorShape({2, 3, kCh}), &rng, -2.0f, 3.0f);
  const Tensor scale = RandomTensor(TensorShape({kCh}), &rng, 0.5f, 1.5f);
  const Tensor offset = RandomTensor(TensorShape({kCh}), &rng, -1.0f, 1.0f);
  const Tensor mean = RandomTensor(TensorShape({kCh}), &rng, -1.0f, 1.0f);
  const Tensor var = RandomTensor(TensorShape({kCh}), &rng, 0.5f, 2.0f);
  const std::map<std::string, Tensor> feeds = {{"x", x}, {"scale", scale}, {"offset", offset}, {"mean", mean}, {"var", var}};
  const std::vector<std::string> fetches = {y, "bn:1", "bn:2", "bn:3"};
  // The batch's statistics in double, per channel.
  std::vector<double> bm(kCh, 0), bv(kCh, 0);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < kCh; ++j) bm[j] += x.data<float>()[r * kCh + j] / kRows;
  }
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < kCh; ++j) bv[j] += std::pow(x.data<float>()[r * kCh + j] - bm[j], 2) / kRows;
  }
  for (bool training : {true, false}) {
    auto out = (*cpu)->Run(feeds, fetches, 1, training);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int64_t j = 0; j < kCh; ++j) {
      EXPECT_NEAR((*out)[1].data<float>()[j], bm[j], 1e-6) << j;
      EXPECT_NEAR((*out)[2].data<float>()[j], bv[j], 1e-5) << j;
      EXPECT_NEAR((*out)[3].data<float>()[j], bv[j] * kRows / (kRows - 1), 1e-5) << j;  // PyTorch's running_var input
    }
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t j = 0; j < kCh; ++j) {
        const double m = training ? bm[j] : mean.data<float>()[j];
        const double v = training ? bv[j] : var.data<float>()[j];
        const double want = (x.data<float>()[r * kCh + j] - m) / std::sqrt(v + 1e-3) * scale.data<float>()[j] +
                            offset.data<float>()[j];
        EXPECT_NEAR((*out)[0].data<float>()[r * kCh + j], want, 1e-5) << training << " " << r << " " << j;
      }
    }
  }
}

// One row has no unbiased variance: evaluating a single example must not
// divide by zero (its biased 0 stands in).
TEST(BatchNormTest, OneRowEvaluates) {
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "x", {}, {{"shape", AttrShape({1, 2})}, {"dtype", AttrType(DT_FLOAT)}});
  for (const char* name : {"scale", "offset", "mean", "var"}) {
    b.Add("Placeholder", name, {}, {{"shape", AttrShape({2})}, {"dtype", AttrType(DT_FLOAT)}});
  }
  const std::string y = b.Add("BatchNorm", "bn", {"x", "scale", "offset", "mean", "var"});
  auto cpu = Executor::Create(g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const Tensor two = Tensor::FromVector<float>({1.0f, 1.0f}, TensorShape({2}));
  const Tensor zero = Tensor::FromVector<float>({0.0f, 0.0f}, TensorShape({2}));
  const Tensor x = Tensor::FromVector<float>({3.0f, -1.0f}, TensorShape({1, 2}));
  auto out = (*cpu)->Run({{"x", x}, {"scale", two}, {"offset", zero}, {"mean", zero}, {"var", two}}, {y, "bn:3"}, 1, false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR((*out)[0].data<float>()[0], 3.0f / std::sqrt(1.0f + 1e-5f), 1e-5);
  EXPECT_EQ((*out)[1].data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace psrt
