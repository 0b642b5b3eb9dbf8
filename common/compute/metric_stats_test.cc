// The metric ops' CPU kernels (their statistics on small hand-checked
// batches) and FinishMetric (summing batches gives the whole split's value).
#include "common/compute/metric_stats.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/compute/executor.h"
#include "common/graph/graph_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs `op` on (logits, labels) and returns its statistics.
absl::StatusOr<std::vector<double>> RunMetric(const std::string& op, const Tensor& logits, const Tensor& labels,
                                        const Attrs& attrs = {}) {
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "logits", {}, {{"shape", AttrShape(logits.shape().dims())}, {"dtype", AttrType(DT_FLOAT)}});
  b.Add("Placeholder", "labels", {}, {{"shape", AttrShape(labels.shape().dims())}, {"dtype", AttrType(labels.dtype())}});
  std::string out = b.Add(op, "m", {"logits", "labels"}, attrs);
  auto exec = Executor::Create(g, ExecutorOptions{1});
  if (!exec.ok()) return exec.status();
  auto r = (*exec)->Run({{"logits", logits}, {"labels", labels}}, {out}, 0, false);
  if (!r.ok()) return r.status();
  std::vector<double> v;
  for (int64_t i = 0; i < (*r)[0].NumElements(); ++i) v.push_back((*r)[0].data<float>()[i]);
  return v;
}

Tensor F(std::vector<float> v, std::vector<int64_t> shape) { return Tensor::FromVector<float>(v, TensorShape(shape)); }
Tensor Ids(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<int64_t>(v, TensorShape({n}));
}

TEST(MetricKernelsTest, AccuracyCountsRightAndExamples) {
  auto s = RunMetric("Accuracy", F({1, 3, 2, 5, 4, 0, 0, 0, 1}, {3, 3}), Ids({1, 1, 2}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre(2, 3));  // row 1's argmax is 0, not its label 1
  auto bin = RunMetric("Accuracy", F({2, -1, 0.5, -3}, {4, 1}), F({1, 1, 0, 0}, {4}));
  ASSERT_TRUE(bin.ok()) << bin.status();
  EXPECT_THAT(*bin, ElementsAre(2, 4));
}

TEST(MetricKernelsTest, TopKAccuracyIsKerasInTopK) {
  // Row 0: label 3 is 2nd highest; row 1: label 0 is lowest; row 2: label 1
  // ties with the 2nd: in (tf.math.in_top_k); row 3: label 5 out of range.
  Tensor logits = F({1, 2, 0, 1.5, /**/ 0, 1, 2, 3, /**/ 3, 1, 1, 0, /**/ 1, 2, 3, 4}, {4, 4});
  auto s = RunMetric("TopKAccuracy", logits, Ids({3, 0, 2, 5}), {{"k", AttrI(2)}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre(2, 4));
  auto k1 = RunMetric("TopKAccuracy", logits, Ids({1, 3, 0, 3}), {{"k", AttrI(1)}});
  ASSERT_TRUE(k1.ok()) << k1.status();
  EXPECT_THAT(*k1, ElementsAre(4, 4));
  auto bad = RunMetric("TopKAccuracy", logits, Ids({1, 3, 0, 3}), {{"k", AttrI(0)}});
  EXPECT_THAT(bad.status().message(), HasSubstr("k is 0"));
}

TEST(MetricKernelsTest, MeanAbsoluteErrorSumsAbsoluteErrors) {
  auto s = RunMetric("MeanAbsoluteError", F({1, 2, 3}, {3, 1}), F({1.5, 0, 3}, {3}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre(2.5, 3));
  EXPECT_FALSE(RunMetric("MeanAbsoluteError", F({1, 2, 3}, {3, 1}), F({1, 2}, {2})).ok());
}

TEST(MetricKernelsTest, PrecisionAndRecallCountAtHalf) {
  // Probabilities > 0.5 for logits > 0: predicted 1,1,0,1,0; labels 1,0,1,1,0.
  Tensor logits = F({2, 0.1f, -1, 3, -2}, {5, 1});
  Tensor labels = F({1, 0, 1, 1, 0}, {5});
  auto p = RunMetric("Precision", logits, labels);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(*p, ElementsAre(2, 3));  // tp, predicted positive
  auto r = RunMetric("Recall", logits, labels);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre(2, 3));  // tp, positive
  auto wide = RunMetric("Precision", F({1, 2, 3, 4}, {2, 2}), F({1, 0}, {2}));
  EXPECT_THAT(wide.status().message(), HasSubstr("one sigmoid output per label"));
}

TEST(MetricKernelsTest, AucCountsPerThreshold) {
  // Probabilities 0.5 (logit 0) and about 0.88 (logit 2); 3 thresholds:
  // -1e-7, 0.5, 1 + 1e-7.
  auto s = RunMetric("Auc", F({0, 2}, {2, 1}), F({0, 1}, {2}), {{"num_thresholds", AttrI(3)}});
  ASSERT_TRUE(s.ok()) << s.status();
  // tp[3], fp[3], tn[3], fn[3]
  EXPECT_THAT(*s, ElementsAre(1, 1, 0, /**/ 1, 0, 0, /**/ 0, 1, 1, /**/ 0, 0, 1));
  auto auc = FinishMetric(MetricStats{"Auc", *s});
  ASSERT_TRUE(auc.ok());
  EXPECT_DOUBLE_EQ(*auc, 1.0);  // the positive scores higher
}

TEST(MetricStatsTest, RatiosOfSumsNotMeansOfRatios) {
  // Precision of two batches: 1/1 and 1/4: the split's is 2/5, not 0.625.
  MetricStats s{"Precision", {}};
  ASSERT_TRUE(s.Add({1, 1}).ok());
  ASSERT_TRUE(s.Add({1, 4}).ok());
  EXPECT_DOUBLE_EQ(*FinishMetric(s), 0.4);
  EXPECT_FALSE(s.Add({1, 2, 3}).ok());
  EXPECT_DOUBLE_EQ(*FinishMetric(MetricStats{"Recall", {0, 0}}), 0.0);  // no positive: 0, as Keras
  EXPECT_FALSE(FinishMetric(MetricStats{"Loss", {1, 2}}).ok());
  EXPECT_FALSE(FinishMetric(MetricStats{"Auc", {1, 2, 3}}).ok());
  EXPECT_TRUE(IsMetricOp("Auc"));
  EXPECT_FALSE(IsMetricOp("SoftmaxCrossEntropy"));
}

TEST(MetricStatsTest, AucOfSummedBatchesIsTheWholeSplits) {
  // 37 examples in batches of 10: summed counts give the AUC of all 37.
  std::vector<float> logits, labels;
  for (int i = 0; i < 37; ++i) {
    labels.push_back(static_cast<float>(i % 3 == 0));
    logits.push_back(std::sin(i * 1.7f) * 3 + (i % 3 == 0 ? 1.0f : 0.0f));
  }
  auto whole = RunMetric("Auc", F(logits, {37, 1}), F(labels, {37}));
  ASSERT_TRUE(whole.ok()) << whole.status();
  MetricStats sum{"Auc", {}};
  for (int begin = 0; begin < 37; begin += 10) {
    const int end = std::min(37, begin + 10);
    std::vector<float> x(logits.begin() + begin, logits.begin() + end), y(labels.begin() + begin, labels.begin() + end);
    auto part = RunMetric("Auc", F(x, {end - begin, 1}), F(y, {end - begin}));
    ASSERT_TRUE(part.ok()) << part.status();
    ASSERT_TRUE(sum.Add(*part).ok());
  }
  EXPECT_EQ(sum.sums, *whole);
  const double auc = *FinishMetric(sum);
  EXPECT_GT(auc, 0.5);
  EXPECT_LE(auc, 1.0);
}

}  // namespace
}  // namespace psrt
