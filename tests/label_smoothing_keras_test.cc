// Label smoothing against Keras' own losses: the softmax and sigmoid
// cross-entropies with `label_smoothing` (the job's
// model.loss.label_smoothing), their value and their gradient by autodiff,
// on the same logits as keras.losses.CategoricalCrossentropy /
// BinaryCrossentropy(from_logits=True, label_smoothing=s) under
// tf.GradientTape (real TensorFlow 2.21, the test-only venv-tf).
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/compute/executor.h"
#include "common/compute/op_test_util.h"
#include "common/graph/graph_analysis.h"
#include "common/graph/graph_builder.h"
#include "common/testing/python_tool.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

struct Case {
  bool softmax;
  float smoothing;
  int rows, cols;
  Tensor logits, labels;
};

struct Result {
  double loss;
  std::vector<double> grad;
};

// Ours: the loss node with its attribute, differentiated as a job's is.
Result Ours(const Case& c) {
  GraphDef g;
  GraphBuilder b(&g);
  std::map<std::string, Tensor> feeds;
  std::vector<std::string> vars = AddFedInputs(&b, {{"logits", c.logits}}, {{"labels", c.labels}}, &feeds);
  Attrs attrs;
  if (c.smoothing > 0) attrs["label_smoothing"] = AttrF(c.smoothing);
  const std::string loss =
      b.Add(c.softmax ? "SoftmaxCrossEntropy" : "SigmoidCrossEntropy", "loss", {"logits", "labels"}, attrs);
  auto grads = AddGradients(&g, loss, vars);
  EXPECT_TRUE(grads.ok()) << grads.status();
  auto exec = Executor::Create(g, ExecutorOptions{1});
  EXPECT_TRUE(exec.ok()) << exec.status();
  auto out = (*exec)->Run(feeds, {loss, (*grads)["logits"]}, 1, true);
  EXPECT_TRUE(out.ok()) << out.status();
  Result r;
  r.loss = (*out)[0].data<float>()[0];
  for (int64_t i = 0; i < (*out)[1].NumElements(); ++i) r.grad.push_back((*out)[1].data<float>()[i]);
  return r;
}

TEST(LabelSmoothingKerasTest, LossAndGradientMatchKeras) {
  std::mt19937 rng(5);
  std::vector<Case> cases;
  for (float s : {0.0f, 0.1f, 0.35f}) {
    Case c{true, s, 16, 10, RandomTensor(TensorShape({16, 10}), &rng, -4, 4), Tensor(DT_INT64, TensorShape({16}))};
    for (int i = 0; i < 16; ++i) c.labels.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
    cases.push_back(std::move(c));
    Case d{false, s, 16, 1, RandomTensor(TensorShape({16, 1}), &rng, -4, 4), Tensor(DT_FLOAT, TensorShape({16}))};
    for (int i = 0; i < 16; ++i) d.labels.data<float>()[i] = static_cast<float>(rng() % 2);
    cases.push_back(std::move(d));
  }
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string in = dir + "/cases.txt", out = dir + "/keras.txt";
  {
    std::ofstream f(in);
    f.precision(9);
    for (const Case& c : cases) {
      f << (c.softmax ? "softmax " : "sigmoid ") << c.smoothing << " " << c.rows << " " << c.cols;
      for (int64_t i = 0; i < c.logits.NumElements(); ++i) f << " " << c.logits.data<float>()[i];
      for (int64_t i = 0; i < c.labels.NumElements(); ++i) {
        f << " " << (c.softmax ? static_cast<double>(c.labels.data<int64_t>()[i]) : c.labels.data<float>()[i]);
      }
      f << "\n";
    }
  }
  absl::Status s = testing::RunPythonTool("tests/tools/keras_label_smoothing.py", {"--input=" + in, "--output=" + out},
                                          "", testing::kVenvTfPython);
  ASSERT_TRUE(s.ok()) << s;
  std::ifstream keras(out);
  double worst = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.softmax ? "softmax" : "sigmoid", " label_smoothing ", c.smoothing));
    std::string line;
    ASSERT_TRUE(std::getline(keras, line)) << "Keras wrote fewer cases";
    std::istringstream words(line);
    Result theirs;
    words >> theirs.loss;
    for (double v; words >> v;) theirs.grad.push_back(v);
    const Result ours = Ours(c);
    ASSERT_EQ(ours.grad.size(), theirs.grad.size());
    EXPECT_NEAR(ours.loss, theirs.loss, 1e-5 + 1e-5 * std::fabs(theirs.loss));
    worst = std::max(worst, std::fabs(ours.loss - theirs.loss));
    for (size_t i = 0; i < ours.grad.size(); ++i) {
      EXPECT_NEAR(ours.grad[i], theirs.grad[i], 1e-6 + 1e-5 * std::fabs(theirs.grad[i])) << "element " << i;
      worst = std::max(worst, std::fabs(ours.grad[i] - theirs.grad[i]));
    }
  }
  std::cout << "FIGURE: label smoothing against Keras (softmax and sigmoid, s = 0, 0.1, 0.35): worst difference "
            << worst << std::endl;
}

}  // namespace
}  // namespace psrt
