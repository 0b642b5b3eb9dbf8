// Every differentiable op's gradient (autodiff + CPU kernels) against
// central finite differences of the same kernels.
#include <algorithm>
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

// Distinct values at least 0.04 apart, shuffled: max-pool windows that
// overlap have no near-ties a finite difference could flip.
Tensor Spread(TensorShape shape, std::mt19937* rng) {
  Tensor t(DT_FLOAT, std::move(shape));
  std::vector<float> v(t.NumElements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = -1.0f + 0.04f * static_cast<float>(i);
  std::shuffle(v.begin(), v.end(), *rng);
  std::copy(v.begin(), v.end(), t.data<float>());
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
  // Convolutions past SAME/VALID: explicit uneven pads, unequal strides,
  // dilations, non-square kernels, groups, depthwise with a multiplier.
  struct ConvCase {
    std::string name;
    Attrs attrs;
    TensorShape x, k;
  };
  std::vector<ConvCase> convs = {
      {"explicit pads, strides 2x1", {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({1, 0, 2, 1})}, {"strides", AttrInts({2, 1})}},
       {2, 5, 6, 2}, {3, 2, 2, 3}},
      {"dilations 2", {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({2, 2, 2, 2})}, {"dilations", AttrInts({2, 2})}},
       {1, 5, 5, 2}, {3, 3, 2, 2}},
      {"2 groups, SAME stride 2", {{"padding", AttrS("SAME")}, {"stride", AttrI(2)}, {"group", AttrI(2)}},
       {2, 5, 5, 4}, {3, 3, 2, 6}},
      {"depthwise", {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({1, 1, 1, 1})}, {"group", AttrI(3)}},
       {2, 4, 4, 3}, {3, 3, 1, 3}},
      {"depthwise multiplier 2, stride 2", {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({1, 1, 1, 1})}, {"group", AttrI(2)}, {"stride", AttrI(2)}},
       {1, 5, 5, 2}, {3, 3, 1, 4}},
  };
  for (const ConvCase& cc : convs) {
    Attrs attrs = cc.attrs;
    cases.push_back({"Conv2D " + cc.name, [attrs](GraphBuilder& b) { return b.Add("Conv2D", "y", {"x", "k"}, attrs); },
                     {{"x", Random(cc.x, &rng)}, {"k", Random(cc.k, &rng)}}});
  }
  cases.push_back({"MaxPool explicit pads", [](GraphBuilder& b) {
                     return b.Add("MaxPool", "y", {"x"}, {{"ksize", AttrI(3)}, {"stride", AttrI(2)}, {"padding", AttrS("EXPLICIT")},
                                                          {"pads", AttrInts({1, 1, 1, 1})}});
                   },
                   {{"x", Spread({2, 5, 5, 2}, &rng)}}});
  for (bool include : {false, true}) {
    cases.push_back({absl::StrCat("AvgPool explicit pads, count_include_pad ", include), [include](GraphBuilder& b) {
                       return b.Add("AvgPool", "y", {"x"}, {{"ksizes", AttrInts({3, 2})}, {"strides", AttrInts({2, 1})},
                                                            {"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({1, 0, 1, 1})},
                                                            {"count_include_pad", AttrB(include)}});
                     },
                     {{"x", Random({2, 5, 4, 3}, &rng)}}});
  }
  cases.push_back({"AvgPool SAME", [](GraphBuilder& b) {
                     return b.Add("AvgPool", "y", {"x"}, {{"ksize", AttrI(2)}, {"stride", AttrI(2)}, {"padding", AttrS("SAME")}});
                   },
                   {{"x", Random({1, 5, 5, 2}, &rng)}}});
  // Broadcasting arithmetic: every way an input can repeat.
  struct BcastCase {
    TensorShape a, b;
  };
  for (const BcastCase& bc : std::vector<BcastCase>{{{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}},
                                                    {{1, 3, 1}, {2, 1, 4}}, {{2, 3}, {}}, {{2, 4, 3, 2}, {1, 4, 1, 1}}}) {
    for (const char* op : {"BroadcastAdd", "BroadcastSub", "BroadcastMul", "BroadcastDiv"}) {
      std::string o = op;
      const bool div = o == "BroadcastDiv";
      Tensor b = div ? Random(bc.b, &rng, 0.5f, 2.0f) : Random(bc.b, &rng);
      cases.push_back({absl::StrCat(o, " ", bc.a.ToString(), " ", bc.b.ToString()),
                       [o](GraphBuilder& g) { return g.Add(o, "y", {"a", "b"}); },
                       {{"a", Random(bc.a, &rng)}, {"b", b}}});
    }
  }
  for (const char* op : {"ReduceSum", "ReduceMean"}) {
    std::string o = op;
    for (bool keep : {false, true}) {
      for (std::vector<int64_t> axes : std::vector<std::vector<int64_t>>{{1, 2}, {0}, {-1}, {}, {0, 2}}) {
        cases.push_back({absl::StrCat(o, " axes ", axes.size(), " keep_dims ", keep),
                         [o, keep, axes](GraphBuilder& g) {
                           return g.Add(o, "y", {"x"}, {{"axes", AttrInts(axes)}, {"keep_dims", AttrB(keep)}});
                         },
                         {{"x", Random({2, 3, 4}, &rng)}},
                         {},
                         /*scalar_output=*/axes.empty() && !keep});
      }
    }
  }
  cases.push_back({"Clip (ReLU6)", [](GraphBuilder& b) { return b.Add("Clip", "y", {"x"}, {{"min", AttrF(0)}, {"max", AttrF(0.5f)}}); },
                   {{"x", Tensor::FromVector<float>({-0.9f, -0.3f, 0.2f, 0.3f, 0.4f, 0.6f, 0.8f, -0.1f, 0.1f, 0.45f, 0.55f, 1.2f},
                                                    TensorShape({3, 4}))}}});
  for (TensorShape shape : {TensorShape({2, 3, 3, 4}), TensorShape({5, 3})}) {
    const int64_t ch = shape.dim(shape.rank() - 1);
    cases.push_back({"BatchNorm " + shape.ToString(),
                     [](GraphBuilder& b) { return b.Add("BatchNorm", "y", {"x", "scale", "offset"}, {{"epsilon", AttrF(1e-3f)}}); },
                     {{"x", Random(shape, &rng)}, {"scale", Random({ch}, &rng, 0.5f, 1.5f)}, {"offset", Random({ch}, &rng)}}});
  }
  cases.push_back({"EmbeddingLookup", [](GraphBuilder& b) { return b.Add("EmbeddingLookup", "y", {"rows", "index"}); },
                   {{"rows", Random({5, 3}, &rng)}},
                   {{"index", Tensor::FromVector<int64_t>({4, 0, 4, 2}, TensorShape({4}))}}});
  // Ids of any rank (an imported model's [batch, tokens]): y [2, 3, dim].
  cases.push_back({"EmbeddingLookup [2,3] ids", [](GraphBuilder& b) { return b.Add("EmbeddingLookup", "y", {"rows", "index"}); },
                   {{"rows", Random({5, 3}, &rng)}},
                   {{"index", Tensor::FromVector<int64_t>({4, 0, 4, 2, 2, 1}, TensorShape({2, 3}))}}});
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
  // Keras' label smoothing: the gradient node carries the loss's attribute.
  cases.push_back({"SoftmaxCrossEntropy label_smoothing 0.2",
                   [](GraphBuilder& b) {
                     return b.Add("SoftmaxCrossEntropy", "loss", {"logits", "labels"},
                                  {{"label_smoothing", AttrF(0.2f)}});
                   },
                   {{"logits", Random({4, 3}, &rng)}},
                   {{"labels", Tensor::FromVector<int64_t>({0, 2, 1, 2}, TensorShape({4}))}}, true});
  cases.push_back({"SigmoidCrossEntropy label_smoothing 0.3",
                   [](GraphBuilder& b) {
                     return b.Add("SigmoidCrossEntropy", "loss", {"logits", "labels"},
                                  {{"label_smoothing", AttrF(0.3f)}});
                   },
                   {{"logits", Random({4, 1}, &rng)}},
                   {{"labels", Tensor::FromVector<float>({0, 1, 1, 0}, TensorShape({4}))}}, true});
  cases.push_back({"MeanSquaredError",
                   [](GraphBuilder& b) { return b.Add("MeanSquaredError", "loss", {"pred", "labels"}); },
                   {{"pred", Random({4, 2}, &rng)}},
                   {{"labels", Random({4, 2}, &rng)}}, true});
  // The sequence-model ops.
  for (bool ax : {false, true}) {
    for (bool ay : {false, true}) {
      Attrs attrs = {{"adj_x", AttrB(ax)}, {"adj_y", AttrB(ay)}};
      cases.push_back({absl::StrCat("BatchMatMul adj_x ", ax, " adj_y ", ay),
                       [attrs](GraphBuilder& b) { return b.Add("BatchMatMul", "y", {"a", "b"}, attrs); },
                       {{"a", Random(ax ? TensorShape({2, 3, 4, 3}) : TensorShape({2, 3, 3, 4}), &rng)},
                        {"b", Random(ay ? TensorShape({2, 3, 5, 4}) : TensorShape({2, 3, 4, 5}), &rng)}}});
    }
  }
  cases.push_back({"LayerNorm", [](GraphBuilder& b) { return b.Add("LayerNorm", "y", {"x", "gamma", "beta"}, {{"epsilon", AttrF(1e-3f)}}); },
                   {{"x", Random({2, 3, 5}, &rng)}, {"gamma", Random({5}, &rng, 0.5f, 1.5f)}, {"beta", Random({5}, &rng)}}});
  cases.push_back({"Slice", [](GraphBuilder& b) {
                     return b.Add("Slice", "y", {"x"}, {{"begin", AttrInts({0, 1, 2})}, {"size", AttrInts({-1, 1, 2})}});
                   },
                   {{"x", Random({2, 3, 5}, &rng)}}});
  cases.push_back({"BroadcastTo", [](GraphBuilder& b) {
                     return b.Add("BroadcastTo", "y", {"x", "ref"}, {{"shape", AttrInts({-2, 3, 4})}});
                   },
                   {{"x", Random({1, 1, 4}, &rng)}},
                   {{"ref", Random({2, 7}, &rng)}}});
  cases.push_back({"Erf", [](GraphBuilder& b) { return b.Add("Erf", "y", {"x"}); }, {{"x", Random({3, 4}, &rng, -2, 2)}}});
  cases.push_back({"Gelu", [](GraphBuilder& b) { return b.Add("Gelu", "y", {"x"}); }, {{"x", Random({3, 4}, &rng, -3, 3)}}});
  cases.push_back({"Sqrt", [](GraphBuilder& b) { return b.Add("Sqrt", "y", {"x"}); }, {{"x", Random({3, 4}, &rng, 0.5f, 2)}}});
  for (float e : {2.0f, 0.5f, -1.5f}) {
    cases.push_back({absl::StrCat("Pow ", e), [e](GraphBuilder& b) { return b.Add("Pow", "y", {"x"}, {{"exponent", AttrF(e)}}); },
                     {{"x", Random({3, 4}, &rng, 0.5f, 2)}}});
  }
  for (const Case& c : cases) Check(c);
}

}  // namespace
}  // namespace psrt
