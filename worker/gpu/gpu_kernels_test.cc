// Every op's GPU kernel against its CPU kernel: the op on random inputs,
// then (through autodiff and an MSE loss) its gradient ops, run by the
// GpuExecutor and the CPU Executor and compared within float tolerance.
// Skipped where there is no GPU or CUDA was not built in.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/cuda/gpu_axpy.h"
#include "common/graph/graph_analysis.h"
#include "common/graph/graph_builder.h"
#include "common/graph/op_registry.h"
#include "gtest/gtest.h"
#include "common/compute/op_test_util.h"
#include "common/compute/executor.h"
#include "worker/gpu/gpu_executor.h"

namespace psrt {
namespace {

// Why the GPU tests cannot run here, or "" when they can.
std::string WhyNoGpu() {
  cuda::GpuProbe p = cuda::ProbeGpu();
  if (!p.available) return p.why_not;
  auto missing = GpuExecutor::OpsWithoutKernel();
  return missing.ok() ? "" : std::string(missing.status().message());
}

#define SKIP_WITHOUT_GPU()                                     \
  do {                                                         \
    std::string why = WhyNoGpu();                              \
    if (!why.empty()) GTEST_SKIP() << "no GPU: " << why;       \
  } while (0)

Tensor Random(TensorShape shape, std::mt19937* rng, float lo = -1, float hi = 1) {
  return RandomTensor(std::move(shape), rng, lo, hi);
}

Tensor Ids(const std::vector<int64_t>& v) {
  return Tensor::FromVector<int64_t>(v, TensorShape({static_cast<int64_t>(v.size())}));
}

struct Case {
  std::string name;
  std::function<std::string(GraphBuilder&)> build;  // returns the op's output
  std::map<std::string, Tensor> variables;          // differentiated
  std::map<std::string, Tensor> constants;          // fed, not differentiated
  bool scalar_output = false;                       // a loss: differentiated as is
};

void ExpectClose(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  if (cpu.dtype() != DT_FLOAT) return;
  int bad = 0;
  for (int64_t i = 0; i < cpu.NumElements(); ++i) {
    float a = cpu.data<float>()[i], b = gpu.data<float>()[i];
    if (!(std::fabs(a - b) <= 1e-4f + 1e-3f * std::fabs(a)) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: cpu " << a << ", gpu " << b;
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << cpu.NumElements() << " differ";
}

// Runs the case's graph (forward, loss, gradients) on both executors.
void Compare(const Case& c) {
  SCOPED_TRACE(c.name);
  GraphDef g;
  GraphBuilder b(&g);
  std::map<std::string, Tensor> feeds;
  std::vector<std::string> vars = AddFedInputs(&b, c.variables, c.constants, &feeds);
  std::string out = c.build(b);
  std::vector<std::string> fetches = {out};
  if (!vars.empty()) {
    std::string loss = out;
    if (!c.scalar_output) {
      auto forward = Executor::Create(g, ExecutorOptions{1});
      ASSERT_TRUE(forward.ok()) << forward.status();
      auto y = (*forward)->Run(feeds, {out}, 7, true);
      ASSERT_TRUE(y.ok()) << y.status();
      std::mt19937 rng(99);
      feeds["target"] = Random((*y)[0].shape(), &rng);
      b.Add("Placeholder", "target", {}, {{"shape", AttrShape((*y)[0].shape().dims())}, {"dtype", AttrType(DT_FLOAT)}});
      loss = b.Add("MeanSquaredError", "loss", {out, "target"});
      fetches.push_back(loss);
    }
    auto grads = AddGradients(&g, loss, vars);
    ASSERT_TRUE(grads.ok()) << grads.status();
    for (const auto& v : vars) fetches.push_back((*grads)[v]);
  }
  auto cpu = Executor::Create(g, ExecutorOptions{2});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = GpuExecutor::Create(g);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto want = (*cpu)->Run(feeds, fetches, 7, true);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int run = 0; run < 2; ++run) {  // the second run reuses pooled memory
    auto got = (*gpu)->Run(feeds, fetches, 7, true);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), fetches.size());
    for (size_t i = 0; i < fetches.size(); ++i) ExpectClose((*want)[i], (*got)[i], fetches[i]);
  }
}

TEST(GpuKernelsTest, EveryGraphOpHasAGpuKernel) {
  auto missing = GpuExecutor::OpsWithoutKernel();
  if (!missing.ok()) GTEST_SKIP() << missing.status();
  EXPECT_TRUE(missing->empty()) << "no GPU kernel for " << (*missing)[0];
}

TEST(GpuKernelsTest, CreateWithoutGpuSaysWhy) {
  if (WhyNoGpu().empty()) GTEST_SKIP() << "a GPU is here";
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "x", {}, {{"shape", AttrShape({2})}, {"dtype", AttrType(DT_FLOAT)}});
  b.Add("Relu", "y", {"x"});
  auto e = GpuExecutor::Create(g);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(e.status().message().empty());
}

TEST(GpuKernelsTest, DenseOpsMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  std::vector<Case> cases;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      TensorShape sa = ta ? TensorShape({53, 37}) : TensorShape({37, 53});
      TensorShape sb = tb ? TensorShape({29, 53}) : TensorShape({53, 29});
      cases.push_back({"MatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                       [ta, tb](GraphBuilder& b) {
                         return b.Add("MatMul", "y", {"a", "b"}, {{"transpose_a", AttrB(ta)}, {"transpose_b", AttrB(tb)}});
                       },
                       {{"a", Random(sa, &rng)}, {"b", Random(sb, &rng)}}});
    }
  }
  cases.push_back({"BiasAdd", [](GraphBuilder& b) { return b.Add("BiasAdd", "y", {"x", "bias"}); },
                   {{"x", Random({3, 5, 40}, &rng)}, {"bias", Random({40}, &rng)}}});
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Identity"}) {
    std::string o = op;
    cases.push_back({o, [o](GraphBuilder& b) { return b.Add(o, "y", {"x"}); }, {{"x", Random({33, 17}, &rng, -3, 3)}}});
  }
  cases.push_back({"Softmax narrow", [](GraphBuilder& b) { return b.Add("Softmax", "y", {"x"}); },
                   {{"x", Random({9, 10}, &rng, -5, 5)}}});
  cases.push_back({"Softmax wide", [](GraphBuilder& b) { return b.Add("Softmax", "y", {"x"}); },
                   {{"x", Random({5, 300}, &rng, -5, 5)}}});
  cases.push_back({"LogSoftmax", [](GraphBuilder& b) { return b.Add("LogSoftmax", "y", {"x"}); },
                   {{"x", Random({5, 300}, &rng, -5, 5)}}});
  for (const std::vector<int64_t>& perm : {std::vector<int64_t>{0, 3, 1, 2}, std::vector<int64_t>{2, 3, 1, 0}}) {
    cases.push_back({"Transpose " + std::to_string(perm[0]) + std::to_string(perm[1]) + std::to_string(perm[2]) +
                         std::to_string(perm[3]),
                     [perm](GraphBuilder& b) { return b.Add("Transpose", "y", {"x"}, {{"perm", AttrInts(perm)}}); },
                     {{"x", Random({3, 4, 5, 6}, &rng)}}});
  }
  cases.push_back({"Transpose of size-1 axes",
                   [](GraphBuilder& b) { return b.Add("Transpose", "y", {"x"}, {{"perm", AttrInts({0, 3, 1, 2})}}); },
                   {{"x", Random({3, 4, 5, 1}, &rng)}}});
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      cases.push_back({"MatMul transpose_a " + std::to_string(ta) + " transpose_b " + std::to_string(tb), [ta, tb](GraphBuilder& b) {
                         return b.Add("MatMul", "y", {"a", "b"}, {{"transpose_a", AttrB(ta)}, {"transpose_b", AttrB(tb)}});
                       },
                       {{"a", Random(ta ? TensorShape({7, 5}) : TensorShape({5, 7}), &rng)},
                        {"b", Random(tb ? TensorShape({6, 7}) : TensorShape({7, 6}), &rng)}}});
    }
  }
  cases.push_back({"Mul", [](GraphBuilder& b) { return b.Add("Mul", "y", {"x", "z"}); },
                   {{"x", Random({20, 30}, &rng)}, {"z", Random({20, 30}, &rng)}}});
  cases.push_back({"AddN", [](GraphBuilder& b) { return b.Add("AddN", "y", {"x", "z", "x", "z"}); },
                   {{"x", Random({7, 9}, &rng)}, {"z", Random({7, 9}, &rng)}}});
  cases.push_back({"Reshape", [](GraphBuilder& b) { return b.Add("Reshape", "y", {"x"}, {{"shape", AttrInts({-1, 6})}}); },
                   {{"x", Random({4, 9}, &rng)}}});
  for (int axis : {-1, 0, 1}) {
    cases.push_back({"ConcatV2 axis " + std::to_string(axis),
                     [axis](GraphBuilder& b) { return b.Add("ConcatV2", "y", {"x", "z", "w"}, {{"axis", AttrI(axis)}}); },
                     {{"x", Random({3, 4, 5}, &rng)}, {"z", Random({3, 4, 5}, &rng)}, {"w", Random({3, 4, 5}, &rng)}}});
  }
  cases.push_back({"Const",
                   [&rng](GraphBuilder& b) {
                     std::string k = b.Add("Const", "k", {}, {{"value", AttrTensor(Random({6, 4}, &rng))},
                                                              {"dtype", AttrType(DT_FLOAT)}});
                     return b.Add("MatMul", "y", {"x", k});
                   },
                   {{"x", Random({5, 6}, &rng)}}});
  for (const Case& c : cases) Compare(c);
}

TEST(GpuKernelsTest, ConvAndPoolMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  std::vector<Case> cases;
  for (std::string pad : {"SAME", "VALID"}) {
    for (int stride : {1, 2}) {
      std::string tag = pad + " stride " + std::to_string(stride);
      cases.push_back({"Conv2D " + tag,
                       [pad, stride](GraphBuilder& b) {
                         return b.Add("Conv2D", "y", {"x", "k"}, {{"padding", AttrS(pad)}, {"stride", AttrI(stride)}});
                       },
                       {{"x", Random({3, 9, 8, 3}, &rng)}, {"k", Random({3, 3, 3, 5}, &rng)}}});
      for (int ksize : {2, 3}) {
        cases.push_back({"MaxPool k" + std::to_string(ksize) + " " + tag,
                         [pad, stride, ksize](GraphBuilder& b) {
                           return b.Add("MaxPool", "y", {"x"},
                                        {{"ksize", AttrI(ksize)}, {"stride", AttrI(stride)}, {"padding", AttrS(pad)}});
                         },
                         {{"x", Random({2, 7, 9, 4}, &rng)}}});
      }
    }
  }
  for (const Case& c : cases) Compare(c);
}

// The second ONNX slice: general convolution windows (explicit pads,
// strides, dilations, groups, depthwise), average pooling, broadcasting
// arithmetic and its reductions, Clip.
TEST(GpuKernelsTest, GroupedConvAvgPoolBroadcastReduceClipMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  std::vector<Case> cases;
  const std::vector<std::pair<std::string, Attrs>> convs = {
      {"explicit pads, strides 2x1", {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({1, 0, 2, 1})}, {"strides", AttrInts({2, 1})}}},
      {"dilations 2", {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({2, 2, 2, 2})}, {"dilations", AttrInts({2, 2})}}},
      {"2 groups", {{"padding", AttrS("SAME")}, {"stride", AttrI(2)}, {"group", AttrI(2)}}},
  };
  for (const auto& [name, attrs] : convs) {
    Attrs a = attrs;
    const bool grouped = a.count("group") > 0;
    cases.push_back({"Conv2D " + name, [a](GraphBuilder& b) { return b.Add("Conv2D", "y", {"x", "k"}, a); },
                     {{"x", Random({2, 9, 8, 4}, &rng)}, {"k", Random(grouped ? TensorShape({3, 2, 2, 6}) : TensorShape({3, 2, 4, 6}), &rng)}}});
  }
  cases.push_back({"Conv2D depthwise x2",
                   [](GraphBuilder& b) {
                     return b.Add("Conv2D", "y", {"x", "k"}, {{"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({1, 1, 1, 1})}, {"group", AttrI(4)}});
                   },
                   {{"x", Random({2, 7, 7, 4}, &rng)}, {"k", Random({3, 3, 1, 8}, &rng)}}});
  for (bool include : {false, true}) {
    cases.push_back({"AvgPool count_include_pad " + std::to_string(include),
                     [include](GraphBuilder& b) {
                       return b.Add("AvgPool", "y", {"x"}, {{"ksizes", AttrInts({3, 3})}, {"strides", AttrInts({2, 2})},
                                                            {"padding", AttrS("EXPLICIT")}, {"pads", AttrInts({1, 1, 1, 1})},
                                                            {"count_include_pad", AttrB(include)}});
                     },
                     {{"x", Random({2, 7, 8, 3}, &rng)}}});
  }
  for (const char* op : {"BroadcastAdd", "BroadcastSub", "BroadcastMul", "BroadcastDiv"}) {
    std::string o = op;
    cases.push_back({o, [o](GraphBuilder& b) { return b.Add(o, "y", {"a", "c"}); },
                     {{"a", Random({2, 5, 1, 3}, &rng)}, {"c", Random({4, 1}, &rng, 0.5f, 2.0f)}}});
  }
  for (const char* op : {"ReduceSum", "ReduceMean"}) {
    std::string o = op;
    cases.push_back({o, [o](GraphBuilder& b) { return b.Add(o, "y", {"x"}, {{"axes", AttrInts({0, 2})}}); },
                     {{"x", Random({3, 4, 5, 2}, &rng)}}});
  }
  cases.push_back({"Clip", [](GraphBuilder& b) { return b.Add("Clip", "y", {"x"}, {{"min", AttrF(-0.5f)}, {"max", AttrF(0.5f)}}); },
                   {{"x", Random({4, 6}, &rng)}}});
  cases.push_back({"BatchNorm", [](GraphBuilder& b) { return b.Add("BatchNorm", "y", {"x", "scale", "offset"}); },
                   {{"x", Random({4, 5, 5, 6}, &rng)}, {"scale", Random({6}, &rng, 0.5f, 1.5f)}, {"offset", Random({6}, &rng)}}});
  for (const Case& c : cases) Compare(c);
}

// BatchNorm with its moving statistics (inputs 3 and 4): a training step
// normalises with the batch's, evaluation with the moving ones; the batch
// mean and unbiased variance (outputs 1 and 3) match the CPU's either way.
TEST(GpuKernelsTest, BatchNormWithMovingStatisticsMatchesCpuInBothModes) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  GraphDef g;
  GraphBuilder b(&g);
  const std::map<std::string, Tensor> feeds = {{"x", Random({4, 5, 5, 6}, &rng)},
                                               {"scale", Random({6}, &rng, 0.5f, 1.5f)},
                                               {"offset", Random({6}, &rng)},
                                               {"mean", Random({6}, &rng)},
                                               {"var", Random({6}, &rng, 0.5f, 2.0f)}};
  for (const auto& [name, t] : feeds) {
    b.Add("Placeholder", name, {}, {{"shape", AttrShape(t.shape().dims())}, {"dtype", AttrType(DT_FLOAT)}});
  }
  const std::string y = b.Add("BatchNorm", "bn", {"x", "scale", "offset", "mean", "var"});
  const std::vector<std::string> fetches = {y, "bn:1", "bn:2", "bn:3"};
  auto cpu = Executor::Create(g, ExecutorOptions{2});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = GpuExecutor::Create(g);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (bool training : {true, false}) {
    auto want = (*cpu)->Run(feeds, fetches, 7, training);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*gpu)->Run(feeds, fetches, 7, training);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < fetches.size(); ++i) ExpectClose((*want)[i], (*got)[i], absl::StrCat(fetches[i], training ? " training" : " evaluation"));
  }
}

// The transformer ops (ONNX imports): batched products, layer norm, the
// element-wise maths of GELU and friends, slices and BroadcastTo; their
// gradient ops through autodiff.
TEST(GpuKernelsTest, TransformerOpsMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  std::vector<Case> cases;
  auto matrix = [](bool adj, int64_t rows, int64_t cols) { return adj ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols}; };
  for (bool ax : {false, true}) {
    for (bool ay : {false, true}) {
      const Attrs attrs = {{"adj_x", AttrB(ax)}, {"adj_y", AttrB(ay)}};
      const std::string tag = " adj_x " + std::to_string(ax) + " adj_y " + std::to_string(ay);
      for (const std::vector<int64_t>& batch : {std::vector<int64_t>{3}, std::vector<int64_t>{2, 3}}) {
        std::vector<int64_t> sa = batch, sb = batch, a_mat = matrix(ax, 5, 7), b_mat = matrix(ay, 7, 6);
        sa.insert(sa.end(), a_mat.begin(), a_mat.end());
        sb.insert(sb.end(), b_mat.begin(), b_mat.end());
        cases.push_back({"BatchMatMul rank " + std::to_string(sa.size()) + tag,
                         [attrs](GraphBuilder& b) { return b.Add("BatchMatMul", "y", {"a", "b"}, attrs); },
                         {{"a", Random(TensorShape(sa), &rng)}, {"b", Random(TensorShape(sb), &rng)}}});
      }
    }
  }
  // Empty batches and empty inner sums (zeros): constants, no loss to differentiate.
  cases.push_back({"BatchMatMul empty batch", [](GraphBuilder& b) { return b.Add("BatchMatMul", "y", {"a", "b"}); },
                   {}, {{"a", Random({0, 3, 4}, &rng)}, {"b", Random({0, 4, 5}, &rng)}}});
  for (bool ax : {false, true}) {
    cases.push_back({"BatchMatMul k = 0 adj_x " + std::to_string(ax),
                     [ax](GraphBuilder& b) { return b.Add("BatchMatMul", "y", {"a", "b"}, {{"adj_x", AttrB(ax)}}); },
                     {}, {{"a", Random(ax ? TensorShape({2, 0, 3}) : TensorShape({2, 3, 0}), &rng)}, {"b", Random({2, 0, 4}, &rng)}}});
  }
  for (int64_t d : {40, 300}) {
    cases.push_back({"LayerNorm d " + std::to_string(d),
                     [](GraphBuilder& b) { return b.Add("LayerNorm", "y", {"x", "gamma", "beta"}, {{"epsilon", AttrF(1e-5f)}}); },
                     {{"x", Random({3, 5, d}, &rng, -2, 3)}, {"gamma", Random({d}, &rng, 0.5f, 1.5f)}, {"beta", Random({d}, &rng)}}});
  }
  cases.push_back({"Erf", [](GraphBuilder& b) { return b.Add("Erf", "y", {"x"}); }, {{"x", Random({33, 17}, &rng, -2, 2)}}});
  cases.push_back({"Gelu", [](GraphBuilder& b) { return b.Add("Gelu", "y", {"x"}); }, {{"x", Random({33, 17}, &rng, -3, 3)}}});
  cases.push_back({"Sqrt", [](GraphBuilder& b) { return b.Add("Sqrt", "y", {"x"}); }, {{"x", Random({33, 17}, &rng, 0.5f, 3)}}});
  for (float e : {2.0f, 3.0f, 0.5f, 1.0f}) {
    cases.push_back({"Pow " + std::to_string(e),
                     [e](GraphBuilder& b) { return b.Add("Pow", "y", {"x"}, {{"exponent", AttrF(e)}}); },
                     {{"x", Random({20, 30}, &rng, 0.5f, 2)}}});
  }
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> slices = {
      {{1, 0, 2}, {2, -1, 3}},   // a box inside
      {{0, 1, 0}, {-1, 3, -1}},  // whole outer and inner axes
      {{3, 4, 5}, {1, 1, 1}},    // one cell
      {{2, 0, 0}, {0, -1, -1}},  // empty: a constant (the mean loss of nothing is NaN)
  };
  for (const auto& [begin, size] : slices) {
    std::vector<int64_t> bg = begin, sz = size;
    const bool empty = std::count(sz.begin(), sz.end(), 0) > 0;
    std::map<std::string, Tensor> x = {{"x", Random({4, 5, 6}, &rng)}};
    cases.push_back({"Slice begin " + TensorShape(bg).ToString() + " size " + TensorShape(sz).ToString(),
                     [bg, sz](GraphBuilder& b) { return b.Add("Slice", "y", {"x"}, {{"begin", AttrInts(bg)}, {"size", AttrInts(sz)}}); },
                     empty ? std::map<std::string, Tensor>{} : x, empty ? x : std::map<std::string, Tensor>{}});
  }
  cases.push_back({"BroadcastTo from ref's batch",
                   [](GraphBuilder& b) { return b.Add("BroadcastTo", "y", {"x", "ref"}, {{"shape", AttrInts({-1, 1, 64})}}); },
                   {{"x", Random({1, 64}, &rng)}}, {{"ref", Random({32, 784}, &rng)}}});
  cases.push_back({"BroadcastTo fixed",
                   [](GraphBuilder& b) { return b.Add("BroadcastTo", "y", {"x", "ref"}, {{"shape", AttrInts({3, 5, 4})}}); },
                   {{"x", Random({5, 1}, &rng)}}, {{"ref", Random({2}, &rng)}}});
  for (const Case& c : cases) Compare(c);
}

// Shapes only known at run time (placeholders of unknown dims) that the
// transformer kernels must refuse, naming the node, rather than crash.
TEST(GpuKernelsTest, TransformerOpsRefuseBadShapes) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  struct Bad {
    std::string op;
    std::vector<Tensor> inputs;
    Attrs attrs;
  };
  const std::vector<Bad> bad = {
      {"BatchMatMul", {Random({2, 3, 4}, &rng), Random({2, 5, 6}, &rng)}, {}},           // inner dims
      {"BatchMatMul", {Random({2, 3, 4}, &rng), Random({3, 4, 6}, &rng)}, {}},           // batch dims
      {"BatchMatMul", {Random({4}, &rng), Random({4, 6}, &rng)}, {}},                    // rank 1
      {"BatchMatMul", {Random({2, 3, 4}, &rng), Random({4, 6}, &rng)}, {}},              // ranks differ
      {"LayerNorm", {Random({3, 4}, &rng), Random({5}, &rng), Random({4}, &rng)}, {}},   // gamma
      {"LayerNormGrad", {Random({3, 5}, &rng), Random({3, 4}, &rng), Random({4}, &rng)}, {}},  // dy
      {"Slice", {Random({4, 5}, &rng)}, {{"begin", AttrInts({1, 4})}, {"size", AttrInts({2, 2})}}},
      {"Slice", {Random({4, 5}, &rng)}, {{"begin", AttrInts({1})}, {"size", AttrInts({2})}}},
      {"SliceGrad", {Random({2, 2}, &rng), Random({4, 5}, &rng)}, {{"begin", AttrInts({0, 0})}, {"size", AttrInts({2, 3})}}},
      {"BroadcastTo", {Random({3, 2}, &rng), Random({4}, &rng)}, {{"shape", AttrInts({-1, 3, 4})}}},
  };
  for (const Bad& t : bad) {
    SCOPED_TRACE(t.op);
    GraphDef g;
    GraphBuilder b(&g);
    std::map<std::string, Tensor> feeds;
    std::vector<std::string> names;
    for (size_t i = 0; i < t.inputs.size(); ++i) {
      std::vector<int64_t> unknown(t.inputs[i].shape().rank(), -1);
      names.push_back(b.Add("Placeholder", "in" + std::to_string(i), {}, {{"shape", AttrShape(unknown)}, {"dtype", AttrType(DT_FLOAT)}}));
      feeds[names.back()] = t.inputs[i];
    }
    std::string y = b.Add(t.op, "bad_node", names, t.attrs);
    auto gpu = GpuExecutor::Create(g);
    if (!gpu.ok()) continue;  // refused when the graph was checked: fine too
    auto r = (*gpu)->Run(feeds, {y}, 1, true);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("bad_node"), std::string::npos) << r.status();
  }
}

TEST(GpuKernelsTest, EmbeddingsMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  std::vector<Case> cases;
  cases.push_back({"EmbeddingLookup", [](GraphBuilder& b) { return b.Add("EmbeddingLookup", "y", {"rows", "index"}); },
                   {{"rows", Random({6, 40}, &rng)}},
                   {{"index", Ids({4, 0, 4, 2, 5, 5, 5, 1})}}});
  // Ids of any rank (an imported model's [batch, tokens]).
  cases.push_back({"EmbeddingLookup [2,4] ids", [](GraphBuilder& b) { return b.Add("EmbeddingLookup", "y", {"rows", "index"}); },
                   {{"rows", Random({6, 40}, &rng)}},
                   {{"index", *Ids({4, 0, 4, 2, 5, 5, 5, 1}).Reshape(TensorShape({2, 4}))}}});
  for (std::string comb : {"sum", "mean"}) {
    cases.push_back({"EmbeddingBag " + comb,
                     [comb](GraphBuilder& b) {
                       return b.Add("EmbeddingBag", "y", {"rows", "index", "splits"}, {{"combiner", AttrS(comb)}});
                     },
                     {{"rows", Random({5, 33}, &rng)}},
                     {{"index", Ids({1, 3, 3, 0, 4, 4, 2})}, {"splits", Ids({0, 2, 2, 5, 7})}}});
  }
  for (const Case& c : cases) Compare(c);
}

TEST(GpuKernelsTest, LossesAndMetricsMatchCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  std::vector<Case> cases;
  std::vector<int64_t> classes;
  for (int i = 0; i < 70; ++i) classes.push_back(i % 10);
  std::vector<float> binary;
  for (int i = 0; i < 70; ++i) binary.push_back(static_cast<float>(i % 3 == 0));
  cases.push_back({"SoftmaxCrossEntropy",
                   [](GraphBuilder& b) { return b.Add("SoftmaxCrossEntropy", "loss", {"logits", "labels"}); },
                   {{"logits", Random({70, 10}, &rng, -4, 4)}}, {{"labels", Ids(classes)}}, true});
  cases.push_back({"SigmoidCrossEntropy",
                   [](GraphBuilder& b) { return b.Add("SigmoidCrossEntropy", "loss", {"logits", "labels"}); },
                   {{"logits", Random({70, 1}, &rng, -4, 4)}},
                   {{"labels", Tensor::FromVector<float>(binary, TensorShape({70}))}}, true});
  cases.push_back({"MeanSquaredError",
                   [](GraphBuilder& b) { return b.Add("MeanSquaredError", "loss", {"pred", "labels"}); },
                   {{"pred", Random({70, 3}, &rng)}}, {{"labels", Random({70, 3}, &rng)}}, true});
  // Not differentiable: inputs as constants.
  cases.push_back({"Accuracy classes", [](GraphBuilder& b) { return b.Add("Accuracy", "acc", {"logits", "labels"}); },
                   {}, {{"logits", Random({70, 10}, &rng)}, {"labels", Ids(classes)}}, true});
  cases.push_back({"Accuracy binary", [](GraphBuilder& b) { return b.Add("Accuracy", "acc", {"logits", "labels"}); },
                   {}, {{"logits", Random({70, 1}, &rng)}, {"labels", Tensor::FromVector<float>(binary, TensorShape({70}))}},
                   true});
  // The other metric ops: their CPU kernels, run on the host for the GPU.
  auto labels_b = [&] { return Tensor::FromVector<float>(binary, TensorShape({70})); };
  cases.push_back({"TopKAccuracy",
                   [](GraphBuilder& b) { return b.Add("TopKAccuracy", "top", {"logits", "labels"}, {{"k", AttrI(3)}}); },
                   {}, {{"logits", Random({70, 10}, &rng)}, {"labels", Ids(classes)}}, true});
  cases.push_back({"MeanAbsoluteError",
                   [](GraphBuilder& b) { return b.Add("MeanAbsoluteError", "mae", {"logits", "labels"}); },
                   {}, {{"logits", Random({70, 1}, &rng)}, {"labels", labels_b()}}, true});
  for (const char* op : {"Precision", "Recall", "Auc"}) {
    cases.push_back({op, [op](GraphBuilder& b) { return b.Add(op, "m", {"logits", "labels"}); }, {},
                     {{"logits", Random({70, 1}, &rng, -4, 4)}, {"labels", labels_b()}}, true});
  }
  for (const Case& c : cases) Compare(c);
}

// The GPU mask is drawn by a counter-based hash, not the CPU's mt19937, so
// it is checked by its statistics: values 0 or 1/(1-rate), about 1-rate of
// them kept, y = x * mask, a new mask per seed, and no dropout in eval.
TEST(GpuKernelsTest, DropoutKeepsTheRateAndScale) {
  SKIP_WITHOUT_GPU();
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "x", {}, {{"shape", AttrShape({200, 500})}, {"dtype", AttrType(DT_FLOAT)}});
  std::string y = b.Add("Dropout", "drop", {"x"}, {{"rate", AttrF(0.3f)}});
  std::string mask = TensorName(ParseTensorName(y).first, 1);
  auto gpu = GpuExecutor::Create(g);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::mt19937 rng(5);
  Tensor x = Random({200, 500}, &rng, 0.5f, 1.5f);
  auto a = (*gpu)->Run({{"x", x}}, {y, mask}, 11, true);
  ASSERT_TRUE(a.ok()) << a.status();
  const float scale = 1.0f / 0.7f;
  int64_t kept = 0;
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    float m = (*a)[1].data<float>()[i];
    ASSERT_TRUE(m == 0.0f || std::fabs(m - scale) < 1e-6f) << m;
    kept += m != 0.0f;
    ASSERT_NEAR((*a)[0].data<float>()[i], x.data<float>()[i] * m, 1e-6f);
  }
  EXPECT_NEAR(static_cast<double>(kept) / x.NumElements(), 0.7, 0.01);
  auto again = (*gpu)->Run({{"x", x}}, {mask}, 11, true);
  auto other = (*gpu)->Run({{"x", x}}, {mask}, 12, true);
  ASSERT_TRUE(again.ok() && other.ok());
  int64_t same = 0, differ = 0;
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    same += (*again)[0].data<float>()[i] == (*a)[1].data<float>()[i];
    differ += (*other)[0].data<float>()[i] != (*a)[1].data<float>()[i];
  }
  EXPECT_EQ(same, x.NumElements());  // a seed gives one mask
  EXPECT_GT(differ, x.NumElements() / 5);
  // The CPU kernel draws the same counter-based mask: the same bits.
  auto cpu = Executor::Create(g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto on_cpu = (*cpu)->Run({{"x", x}}, {mask}, 11, true);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_EQ(std::memcmp((*on_cpu)[0].data<float>(), (*a)[1].data<float>(), x.NumElements() * sizeof(float)), 0);
  auto eval = (*gpu)->Run({{"x", x}}, {y, mask}, 11, false);
  ASSERT_TRUE(eval.ok()) << eval.status();
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    ASSERT_EQ((*eval)[0].data<float>()[i], x.data<float>()[i]);
    ASSERT_EQ((*eval)[1].data<float>()[i], 1.0f);
  }
}

TEST(GpuKernelsTest, BadIdsAndLabelsNameTheNode) {
  SKIP_WITHOUT_GPU();
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "rows", {}, {{"shape", AttrShape({4, 3})}, {"dtype", AttrType(DT_FLOAT)}});
  b.Add("Placeholder", "index", {}, {{"shape", AttrShape({2})}, {"dtype", AttrType(DT_INT64)}});
  std::string y = b.Add("EmbeddingLookup", "lookup", {"rows", "index"});
  auto gpu = GpuExecutor::Create(g);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::mt19937 rng(6);
  auto r = (*gpu)->Run({{"rows", Random({4, 3}, &rng)}, {"index", Ids({1, 4})}}, {y}, 1, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lookup"), std::string::npos) << r.status();
  // The flag is cleared per step: good ids work afterwards.
  auto ok = (*gpu)->Run({{"rows", Random({4, 3}, &rng)}, {"index", Ids({1, 3})}}, {y}, 1, true);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

}  // namespace
}  // namespace psrt
