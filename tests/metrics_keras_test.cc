// psrt's evaluation metrics against Keras' own (keras.metrics, TensorFlow
// 2.21 / Keras 3) on the same predictions and labels: psrt's metric kernels
// run on batches of 128 over 1000 examples (the last batch 104), their
// statistics summed and finished once as the evaluator does; Keras updates
// its metric once with all of them. Both count the same integers, so what
// remains is Keras' float32 rounding of the ratios and of AUC's 199
// trapezoids: 1e-5 bounds it with room (199 terms x 2^-24 ~ 1.2e-5 at the
// very worst, about 1e-7 in practice).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/compute/executor.h"
#include "common/compute/metric_stats.h"
#include "common/graph/graph_builder.h"
#include "common/testing/python_tool.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr int kExamples = 1000;
constexpr int kBatch = 128;

// `op` over the examples in batches of kBatch, finished once. logits:
// [kExamples, width]; labels int64 (classes) or float.
double Metric(const std::string& op, const std::vector<float>& logits, int width, const Tensor& labels,
              const Attrs& attrs = {}) {
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "logits", {}, {{"shape", AttrShape({-1, width})}, {"dtype", AttrType(DT_FLOAT)}});
  b.Add("Placeholder", "labels", {}, {{"shape", AttrShape({-1})}, {"dtype", AttrType(labels.dtype())}});
  const std::string out = b.Add(op, "m", {"logits", "labels"}, attrs);
  auto exec = Executor::Create(g, ExecutorOptions{1});
  EXPECT_TRUE(exec.ok()) << exec.status();
  if (!exec.ok()) return NAN;
  MetricStats stats{op, {}};
  for (int begin = 0; begin < kExamples; begin += kBatch) {
    const int n = std::min(kBatch, kExamples - begin);
    Tensor x(DT_FLOAT, TensorShape({n, width}));
    std::copy(logits.begin() + begin * width, logits.begin() + (begin + n) * width, x.data<float>());
    Tensor y(labels.dtype(), TensorShape({n}));
    std::memcpy(y.raw_data(), static_cast<const char*>(labels.raw_data()) + begin * DataTypeSize(labels.dtype()),
                n * DataTypeSize(labels.dtype()));
    auto r = (*exec)->Run({{"logits", x}, {"labels", y}}, {out}, 0, false);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return NAN;
    std::vector<double> v((*r)[0].data<float>(), (*r)[0].data<float>() + (*r)[0].NumElements());
    EXPECT_TRUE(stats.Add(v).ok());
  }
  auto value = FinishMetric(stats);
  EXPECT_TRUE(value.ok()) << value.status();
  return value.ok() ? *value : NAN;
}

TEST(MetricsKerasTest, EveryMetricMatchesKeras) {
  const std::string dir = ::testing::TempDir();
  std::mt19937 rng(25);
  std::normal_distribution<float> normal(0, 1);
  std::uniform_real_distribution<float> uniform(0, 1);
  std::map<std::string, double> ours;

  // Ten classes: logits lean towards the label.
  std::vector<float> logits(kExamples * 10);
  Tensor classes(DT_INT64, TensorShape({kExamples}));
  {
    std::ofstream f(dir + "/classes.txt");
    for (int i = 0; i < kExamples; ++i) {
      const int64_t label = rng() % 10;
      classes.data<int64_t>()[i] = label;
      f << label;
      for (int c = 0; c < 10; ++c) {
        logits[i * 10 + c] = normal(rng) + (c == label ? 1.0f : 0.0f);
        f << absl::StrFormat(" %.9g", logits[i * 10 + c]);
      }
      f << "\n";
    }
  }
  ours["accuracy"] = Metric("Accuracy", logits, 10, classes);
  ours["top_k_accuracy"] = Metric("TopKAccuracy", logits, 10, classes, {{"k", AttrI(5)}});
  ours["top_3_accuracy"] = Metric("TopKAccuracy", logits, 10, classes, {{"k", AttrI(3)}});

  // Binary: Keras reads the probabilities psrt computes from the logits.
  std::vector<float> scores(kExamples);
  Tensor binary(DT_FLOAT, TensorShape({kExamples}));
  {
    std::ofstream f(dir + "/binary.txt");
    for (int i = 0; i < kExamples; ++i) {
      const float z = 2 * normal(rng);
      const float label = uniform(rng) < 1.0f / (1.0f + std::exp(-z)) ? 1.0f : 0.0f;
      scores[i] = z + normal(rng) - 0.7f;
      binary.data<float>()[i] = label;
      f << label << absl::StrFormat(" %.9g\n", 1.0f / (1.0f + std::exp(-scores[i])));
    }
  }
  ours["binary_accuracy"] = Metric("Accuracy", scores, 1, binary);
  ours["precision"] = Metric("Precision", scores, 1, binary);
  ours["recall"] = Metric("Recall", scores, 1, binary);
  ours["auc"] = Metric("Auc", scores, 1, binary, {{"num_thresholds", AttrI(200)}});

  // Regression.
  std::vector<float> pred(kExamples);
  Tensor target(DT_FLOAT, TensorShape({kExamples}));
  {
    std::ofstream f(dir + "/regression.txt");
    for (int i = 0; i < kExamples; ++i) {
      target.data<float>()[i] = 3 * normal(rng);
      pred[i] = target.data<float>()[i] + normal(rng);
      f << absl::StrFormat("%.9g %.9g\n", target.data<float>()[i], pred[i]);
    }
  }
  ours["mae"] = Metric("MeanAbsoluteError", pred, 1, target);

  const std::string report = dir + "/keras.txt";
  absl::Status s = testing::RunPythonTool("tests/tools/check_metrics.py", {"--dir=" + dir}, report,
                                          testing::kVenvTfPython);
  std::ifstream in(report);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(s.ok()) << s << "\n" << text;
  ASSERT_NE(text.find("\nOK"), std::string::npos) << text;
  std::map<std::string, double> keras;
  std::istringstream lines(text);
  std::string name, value;
  while (lines >> name >> value) {
    if (name != "OK" && name != "keras") keras[name] = std::stod(value);
  }
  double worst = 0;
  std::string worst_name;
  for (const auto& [metric, v] : ours) {
    ASSERT_TRUE(keras.count(metric)) << metric << "\n" << text;
    std::cout << absl::StrFormat("%-16s psrt %.7f keras %.7f\n", metric, v, keras[metric]);
    EXPECT_NEAR(v, keras[metric], 1e-5) << metric;
    if (std::fabs(v - keras[metric]) >= worst) {
      worst = std::fabs(v - keras[metric]);
      worst_name = metric;
    }
  }
  std::cout << absl::StrFormat("FIGURE: worst |psrt - keras| over %d metrics on %d examples (batches of %d): %.3g (%s)\n",
                               ours.size(), kExamples, kBatch, worst, worst_name);
  std::cout << absl::StrFormat("FIGURE: auc with 200 thresholds (psrt) %.6f vs exact ROC AUC %.6f: %.3g apart\n",
                               ours["auc"], keras["exact_auc"], std::fabs(ours["auc"] - keras["exact_auc"]));
  EXPECT_NEAR(ours["auc"], keras["exact_auc"], 0.01);  // 200 thresholds: close to the exact AUC
}

}  // namespace
}  // namespace psrt
