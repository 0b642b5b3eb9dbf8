// Every differentiable op's gradient (autodiff + CPU kernels) against
// central finite differences of the same kernels.
#include <random>

#include "absl/strings/str_cat.h"

#include "common/graph/graph_analysis.h"
#include "gtest/gtest.h"
#include "common/compute/op_test_util.h"
#include "common/compute/executor.h"

namespace psrt {
namespace {

struct Case {
  std::string name;
  // Builds the op on the given variable and placeholder names; returns its
  // output tensor name.
  std::function<std::string(GraphBuilder&)> build;
  std::map<std::string, Tensor> variables;  // differentiated
  std::map<std::string, Tensor> constants;  // fed, not differentiated
  bool scalar_output = false;
};

Tensor Random(TensorShape shape, std::mt19937* rng, float lo = -1, float hi = 1) {
  return RandomTensor(std::move(shape), rng, lo, hi);
}

// Values kept away from zero, where relu and max-pool ties have kinks.
Tensor AwayFromZero(TensorShape shape, std::mt19937* rng) {
  Tensor t = Random(std::move(shape), rng, 0.2f, 1.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    if (sign(*rng)) t.data<float>()[i] = -t.data<float>()[i];
  }
  return t;
}

void Check(const Case& c) {
  SCOPED_TRACE(c.name);
  GraphDef g;
  GraphBuilder b(&g);
  std::map<std::string, Tensor> feeds;
  std::vector<std::string> vars = AddFedInputs(&b, c.variables, c.constants, &feeds);
  std::string out = c.build(b);
  std::string loss = out;
  if (!c.scalar_output) {
    // L = mean((out - target)^2) with a fixed random target.
    std::mt19937 rng(99);
    auto forward = Executor::Create(g, ExecutorOptions{1});
    ASSERT_TRUE(forward.ok()) << forward.status();
    auto y = (*forward)->Run(feeds, {out}, 7, true);
    ASSERT_TRUE(y.ok()) << y.status();
    Shape s = (*y)[0].shape().dims();
    feeds["target"] = Random(TensorShape(s), &rng);
    b.Add("Placeholder", "target", {}, {{"shape", AttrShape(s)}, {"dtype", AttrType(DT_FLOAT)}});
    loss = b.Add("MeanSquaredError", "loss", {out, "target"});
  }
  auto grads = AddGradients(&g, loss, vars);
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto exec = Executor::Create(g, ExecutorOptions{2});
  ASSERT_TRUE(exec.ok()) << exec.status();
  std::vector<std::string> fetches = {loss};
  for (const auto& v : vars) fetches.push_back((*grads)[v]);
  auto analytic = (*exec)->Run(feeds, fetches, 7, true);
  ASSERT_TRUE(analytic.ok()) << analytic.status();
  auto loss_at = [&](const std::map<std::string, Tensor>& f) {
    auto r = (*exec)->Run(f, {loss}, 7, true);
    EXPECT_TRUE(r.ok()) << r.status();
    return static_cast<double>((*r)[0].data<float>()[0]);
  };
  const float eps = 1e-2f;
  for (size_t v = 0; v < vars.size(); ++v) {
    const Tensor& grad = (*analytic)[v + 1];
    ASSERT_EQ(grad.shape(), c.variables.at(vars[v]).shape()) << vars[v];
    for (int64_t i = 0; i < grad.NumElements(); ++i) {
      std::map<std::string, Tensor> plus = feeds, minus = feeds;
      plus[vars[v]] = feeds[vars[v]].Copy();
      minus[vars[v]] = feeds[vars[v]].Copy();
      plus[vars[v]].data<float>()[i] += eps;
      minus[vars[v]].data<float>()[i] -= eps;
      double numeric = (loss_at(plus) - loss_at(minus)) / (2 * eps);
      double got = grad.data<float>()[i];
      EXPECT_NEAR(got, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << vars[v] << "[" << i << "]";
    }
  }
}

TEST(GradientCheckTest, EveryOp) {
  std::mt19937 rng(1);
  std::vector<Case> cases;
  cases.push_back({"MatMul", [](GraphBuilder& b) { return b.Add("MatMul", "y", {"a", "b"}); },
                   {{"a", Random({3, 4}, &rng)}, {"b", Random({4, 5}, &rng)}}});
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      if (!ta && !tb) continue;
      Attrs attrs = {{"transpose_a", AttrB(ta)}, {"transpose_b", AttrB(tb)}};
      cases.push_back({absl::StrCat("MatMul transpose_a ", ta, " transpose_b ", tb),
                       [attrs](GraphBuilder& b) { return b.Add("MatMul", "y", {"a", "b"}, attrs); },
                       {{"a", Random(ta ? TensorShape({4, 3}) : TensorShape({3, 4}), &rng)},
                        {"b", Random(tb ? TensorShape({5, 4}) : TensorShape({4, 5}), &rng)}}});
    }
  }
  cases.push_back({"Transpose", [](GraphBuilder& b) { return b.Add("Transpose", "y", {"x"}, {{"perm", AttrInts({0, 3, 1, 2})}}); },
                   {{"x", Random({2, 3, 4, 5}, &rng)}}});
  cases.push_back({"Transpose of size-1 axes",
                   [](GraphBuilder& b) { return b.Add("Transpose", "y", {"x"}, {{"perm", AttrInts({0, 3, 1, 2})}}); },
                   {{"x", Random({2, 3, 4, 1}, &rng)}}});
  cases.push_back({"BiasAdd", [](GraphBuilder& b) { return b.Add("BiasAdd", "y", {"x", "bias"}); },
                   {{"x", Random({3, 4}, &rng)}, {"bias", Random({4}, &rng)}}});
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Identity"}) {
    std::string o = op;
    cases.push_back({o, [o](GraphBuilder& b) { return b.Add(o, "y", {"x"}); }, {{"x", AwayFromZero({3, 4}, &rng)}}});
  }
  cases.push_back({"Mul", [](GraphBuilder& b) { return b.Add("Mul", "y", {"x", "z"}); },
                   {{"x", Random({2, 3}, &rng)}, {"z", Random({2, 3}, &rng)}}});
  cases.push_back({"AddN", [](GraphBuilder& b) { return b.Add("AddN", "y", {"x", "z", "x"}); },
                   {{"x", Random({2, 3}, &rng)}, {"z", Random({2, 3}, &rng)}}});
  cases.push_back({"Reshape", [](GraphBuilder& b) { return b.Add("Reshape", "y", {"x"}, {{"shape", AttrInts({-1, 6})}}); },
                   {{"x", Random({3, 4}, &rng)}}});
  cases.push_back({"ConcatV2", [](GraphBuilder& b) { return b.Add("ConcatV2", "y", {"x", "z"}, {{"axis", AttrI(-1)}}); },
                   {{"x", Random({2, 3}, &rng)}, {"z", Random({2, 2}, &rng)}}});
  cases.push_back({"Dropout", [](GraphBuilder& b) { return b.Add("Dropout", "y", {"x"}, {{"rate", AttrF(0.5f)}}); },
                   {{"x", Random({4, 5}, &rng)}}});
  for (std::string pad : {"SAME", "VALID"}) {
    for (int stride : {1, 2}) {
      cases.push_back({"Conv2D " + pad + " stride " + std::to_string(stride),
                       [pad, stride](GraphBuilder& b) {
                         return b.Add("Conv2D", "y", {"x", "k"}, {{"padding", AttrS(pad)}, {"stride", AttrI(stride)}});
                       },
                       {{"x", Random({2, 5, 5, 2}, &rng)}, {"k", Random({3, 3, 2, 3}, &rng)}}});
    }
  }
  cases.push_back({"MaxPool", [](GraphBuilder& b) {
                     return b.Add("MaxPool", "y", {"x"}, {{"ksize", AttrI(2)}, {"stride", AttrI(2)}, {"padding", AttrS("SAME")}});
                   },
                   {{"x", Random({2, 5, 5, 3}, &rng)}}});
  cases.push_back({"EmbeddingLookup", [](GraphBuilder& b) { return b.Add("EmbeddingLookup", "y", {"rows", "index"}); },
                   {{"rows", Random({5, 3}, &rng)}},
                   {{"index", Tensor::FromVector<int64_t>({4, 0, 4, 2}, TensorShape({4}))}}});
  for (std::string comb : {"sum", "mean"}) {
    cases.push_back({"EmbeddingBag " + comb,
                     [comb](GraphBuilder& b) {
                       return b.Add("EmbeddingBag", "y", {"rows", "index", "splits"}, {{"combiner", AttrS(comb)}});
                     },
                     {{"rows", Random({5, 3}, &rng)}},
                     {{"index", Tensor::FromVector<int64_t>({1, 3, 3, 0, 4}, TensorShape({5}))},
                      {"splits", Tensor::FromVector<int64_t>({0, 2, 2, 5}, TensorShape({4}))}}});
  }
  cases.push_back({"SoftmaxCrossEntropy",
                   [](GraphBuilder& b) { return b.Add("SoftmaxCrossEntropy", "loss", {"logits", "labels"}); },
                   {{"logits", Random({4, 3}, &rng)}},
                   {{"labels", Tensor::FromVector<int64_t>({0, 2, 1, 2}, TensorShape({4}))}}, true});
  cases.push_back({"SigmoidCrossEntropy",
                   [](GraphBuilder& b) { return b.Add("SigmoidCrossEntropy", "loss", {"logits", "labels"}); },
                   {{"logits", Random({4, 1}, &rng)}},
                   {{"labels", Tensor::FromVector<float>({0, 1, 1, 0}, TensorShape({4}))}}, true});
  cases.push_back({"MeanSquaredError",
                   [](GraphBuilder& b) { return b.Add("MeanSquaredError", "loss", {"pred", "labels"}); },
                   {{"pred", Random({4, 2}, &rng)}},
                   {{"labels", Random({4, 2}, &rng)}}, true});
  for (const Case& c : cases) Check(c);
}

}  // namespace
}  // namespace psrt
