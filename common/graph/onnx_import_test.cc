// The ONNX importer on models built here (onnx.ModelProto filled in C++):
// what imports and computes as ONNX defines, what is refused and how, and
// that hostile files are errors rather than crashes.
#include "common/graph/onnx_import.h"

#include <cmath>
#include <limits>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/compute/executor.h"
#include "common/graph/graph_analysis.h"
#include "common/graph/model_compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

// Builds ModelProtos.
class ModelMaker {
 public:
  ModelMaker() {
    m_.set_ir_version(8);
    auto* o = m_.add_opset_import();
    o->set_domain("");
    o->set_version(13);
    g_ = m_.mutable_graph();
  }
  void Input(const std::string& name, const std::vector<int64_t>& dims) {
    auto* v = g_->add_input();
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i == 0) {
        t->mutable_shape()->add_dim()->set_dim_param("batch");
      } else {
        t->mutable_shape()->add_dim()->set_dim_value(dims[i]);
      }
    }
  }
  void Output(const std::string& name) { g_->add_output()->set_name(name); }
  onnx::TensorProto* Init(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return t;
  }
  void InitInt64(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  // Random values, kept for the reference computation.
  const std::vector<float>& Weight(const std::string& name, const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    std::vector<float>& v = weights_[name];
    v.resize(n);
    for (float& x : v) x = u(rng_);
    Init(name, dims, v);
    return v;
  }
  onnx::NodeProto* Node(const std::string& op, const std::string& name, const std::vector<std::string>& in,
                        const std::vector<std::string>& out) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void IntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void IntsAttr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  onnx::ModelProto& model() { return m_; }
  const std::vector<float>& weight(const std::string& name) { return weights_[name]; }

 private:
  onnx::ModelProto m_;
  onnx::GraphProto* g_;
  std::map<std::string, std::vector<float>> weights_;
  std::mt19937 rng_{5};
};

// input [b,1,4,4] -> Flatten -> Gemm(8, transB) -> Relu -> Gemm(3) -> "logits",
// and a second head from the hidden layer: Gemm(2) -> Einsum -> "aux".
ModelMaker Mlp() {
  ModelMaker m;
  m.Input("input", {-1, 1, 4, 4});
  m.Weight("fc1.weight", {8, 16});
  m.Weight("fc1.bias", {8});
  m.Weight("fc2.weight", {3, 8});
  m.Weight("fc2.bias", {3});
  m.Weight("aux.weight", {2, 8});
  m.Node("Flatten", "/Flatten", {"input"}, {"flat"});
  ModelMaker::IntAttr(m.Node("Gemm", "/fc1/Gemm", {"flat", "fc1.weight", "fc1.bias"}, {"h"}), "transB", 1);
  m.Node("Relu", "/Relu", {"h"}, {"hr"});
  ModelMaker::IntAttr(m.Node("Gemm", "/fc2/Gemm", {"hr", "fc2.weight", "fc2.bias"}, {"logits"}), "transB", 1);
  ModelMaker::IntAttr(m.Node("Gemm", "/aux/Gemm", {"hr", "aux.weight"}, {"a"}), "transB", 1);
  m.Node("Einsum", "/aux/Einsum", {"a"}, {"aux"});
  m.Output("logits");
  m.Output("aux");
  return m;
}

Tensor RandomBatch(TensorShape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor t(DT_FLOAT, std::move(shape));
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// Imports `m` with `input` fed by a placeholder of `feed_shape`, runs the
// forward pass on `x` and returns the output.
absl::StatusOr<Tensor> Forward(const onnx::ModelProto& m, const Shape& feed_shape, const Tensor& x,
                               const std::string& output, OnnxImport* imported = nullptr, bool training = false) {
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "image", {}, {{"shape", AttrShape(feed_shape)}, {"dtype", AttrType(DT_FLOAT)}});
  OnnxImportOptions o;
  o.inputs["input"] = {"image", feed_shape};
  o.outputs = {output};
  absl::StatusOr<OnnxImport> r = ImportOnnx(m, o, &b);
  if (!r.ok()) return r.status();
  std::map<std::string, Tensor> feeds = {{"image", x}};
  for (const VariableDef& v : r->variables) {
    absl::StatusOr<Tensor> t = Tensor::FromProto(v.initializer().tensor());
    if (!t.ok()) return t.status();
    feeds[v.name()] = *t;
  }
  absl::StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(g, ExecutorOptions{1});
  if (!exec.ok()) return exec.status();
  absl::StatusOr<std::vector<Tensor>> out = (*exec)->Run(feeds, {r->outputs[output]}, 1, training);
  if (!out.ok()) return out.status();
  if (imported) *imported = *r;
  return (*out)[0];
}

// y[b, o] = sum_i x[b, i] w[o, i] + bias[o]
std::vector<float> Linear(const std::vector<float>& x, int64_t batch, int64_t in, const std::vector<float>& w,
                          const std::vector<float>& bias, int64_t out) {
  std::vector<float> y(batch * out);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t o = 0; o < out; ++o) {
      double s = bias.empty() ? 0 : bias[o];
      for (int64_t i = 0; i < in; ++i) s += x[b * in + i] * w[o * in + i];
      y[b * out + o] = static_cast<float>(s);
    }
  }
  return y;
}

TEST(OnnxImportTest, MlpComputesAsOnnxDefinesAndSkipsTheUnusedHead) {
  ModelMaker m = Mlp();
  Tensor x = RandomBatch(TensorShape({5, 4, 4, 1}), 1);
  OnnxImport imported;
  absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 4, 4, 1}, x, "logits", &imported);
  ASSERT_TRUE(y.ok()) << y.status();
  // The second head (and its unsupported Einsum) is not imported.
  std::vector<std::string> names;
  for (const VariableDef& v : imported.variables) names.push_back(v.name());
  EXPECT_THAT(names, testing::UnorderedElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
  for (const VariableDef& v : imported.variables) {
    EXPECT_EQ(v.initializer().kind(), InitializerDef::TENSOR);
    if (v.name() == "fc1.weight") EXPECT_THAT(v.shape().dim(), testing::ElementsAre(8, 16));  // PyTorch's layout
  }
  std::vector<float> xs(x.data<float>(), x.data<float>() + x.NumElements());
  std::vector<float> h = Linear(xs, 5, 16, m.weight("fc1.weight"), m.weight("fc1.bias"), 8);
  for (float& v : h) v = std::max(v, 0.0f);
  std::vector<float> want = Linear(h, 5, 8, m.weight("fc2.weight"), m.weight("fc2.bias"), 3);
  ASSERT_EQ(y->shape(), TensorShape({5, 3}));
  for (int i = 0; i < 15; ++i) EXPECT_NEAR(y->data<float>()[i], want[i], 1e-5) << i;
}

// Conv (pads 1, 3x3) -> Relu -> MaxPool 2x2 -> Flatten -> Gemm, on NCHW as
// ONNX defines it, against a direct computation.
TEST(OnnxImportTest, CnnComputesAsOnnxDefines) {
  ModelMaker m;
  const int64_t c = 2, h = 6, w = 6, f = 3, k = 3, out = 4;
  m.Input("input", {-1, c, h, w});
  m.Weight("conv.weight", {f, c, k, k});
  m.Weight("conv.bias", {f});
  m.Weight("fc.weight", {out, f * 3 * 3});
  m.Weight("fc.bias", {out});
  auto* conv = m.Node("Conv", "/conv/Conv", {"input", "conv.weight", "conv.bias"}, {"c"});
  ModelMaker::IntsAttr(conv, "pads", {1, 1, 1, 1});
  ModelMaker::IntsAttr(conv, "kernel_shape", {3, 3});
  ModelMaker::IntsAttr(conv, "strides", {1, 1});
  m.Node("Relu", "/Relu", {"c"}, {"r"});
  auto* pool = m.Node("MaxPool", "/pool/MaxPool", {"r"}, {"p"});
  ModelMaker::IntsAttr(pool, "kernel_shape", {2, 2});
  ModelMaker::IntsAttr(pool, "strides", {2, 2});
  m.Node("Flatten", "/Flatten", {"p"}, {"flat"});
  ModelMaker::IntAttr(m.Node("Gemm", "/fc/Gemm", {"flat", "fc.weight", "fc.bias"}, {"logits"}), "transB", 1);
  m.Output("logits");

  const int64_t batch = 2;
  Tensor x = RandomBatch(TensorShape({batch, c, h, w}), 2);  // fed as the graph input's NCHW
  absl::StatusOr<Tensor> y = Forward(m.model(), {-1, c, h, w}, x, "logits");
  ASSERT_TRUE(y.ok()) << y.status();

  const std::vector<float>& W = m.weight("conv.weight");
  const std::vector<float>& B = m.weight("conv.bias");
  const float* X = x.data<float>();
  std::vector<float> pooled(batch * f * 3 * 3);
  for (int64_t n = 0; n < batch; ++n) {
    std::vector<float> act(f * h * w);
    for (int64_t o = 0; o < f; ++o) {
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < w; ++j) {
          double s = B[o];
          for (int64_t ci = 0; ci < c; ++ci) {
            for (int64_t di = 0; di < k; ++di) {
              for (int64_t dj = 0; dj < k; ++dj) {
                int64_t ii = i + di - 1, jj = j + dj - 1;
                if (ii < 0 || jj < 0 || ii >= h || jj >= w) continue;
                s += X[((n * c + ci) * h + ii) * w + jj] * W[((o * c + ci) * k + di) * k + dj];
              }
            }
          }
          act[(o * h + i) * w + j] = std::max(0.0f, static_cast<float>(s));
        }
      }
    }
    for (int64_t o = 0; o < f; ++o) {
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
          float mx = -1e30f;
          for (int di = 0; di < 2; ++di) {
            for (int dj = 0; dj < 2; ++dj) mx = std::max(mx, act[(o * h + 2 * i + di) * w + 2 * j + dj]);
          }
          pooled[((n * f + o) * 3 + i) * 3 + j] = mx;
        }
      }
    }
  }
  std::vector<float> want = Linear(pooled, batch, f * 9, m.weight("fc.weight"), m.weight("fc.bias"), out);
  ASSERT_EQ(y->shape(), TensorShape({batch, out}));
  for (int i = 0; i < batch * out; ++i) EXPECT_NEAR(y->data<float>()[i], want[i], 1e-4) << i;
}

TEST(OnnxImportTest, AnImageFeatureFeedsAnNchwInput) {
  // A [H, W, C] feature for a [C, H, W] input is the same image: the result
  // equals feeding the NCHW tensor itself.
  ModelMaker m;
  m.Input("input", {-1, 3, 2, 2});
  m.Node("Flatten", "/Flatten", {"input"}, {"flat"});
  m.Output("flat");
  Tensor nhwc = RandomBatch(TensorShape({2, 2, 2, 3}), 3);
  absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 2, 2, 3}, nhwc, "flat");
  ASSERT_TRUE(y.ok()) << y.status();
  for (int n = 0; n < 2; ++n) {
    for (int ch = 0; ch < 3; ++ch) {
      for (int p = 0; p < 4; ++p) {
        EXPECT_EQ(y->data<float>()[n * 12 + ch * 4 + p], nhwc.data<float>()[n * 12 + p * 3 + ch]);
      }
    }
  }
}

TEST(OnnxImportTest, AnUnsupportedOpIsRefusedNamingTheNode) {
  ModelMaker m = Mlp();
  absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 4, 4, 1}, RandomBatch(TensorShape({1, 4, 4, 1}), 1), "aux");
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(y.status().message(), HasSubstr("ONNX node /aux/Einsum (Einsum): op Einsum is not supported"));
}

// The exporters' shape arithmetic: x.view(B * 2, 6) written as
// Shape -> Gather -> Mul -> Unsqueeze -> Concat -> Reshape is evaluated at
// import time with the batch size as a symbol, and runs for any batch.
TEST(OnnxImportTest, ShapeArithmeticOnTheBatchIsFolded) {
  ModelMaker m;
  m.Input("input", {-1, 3, 4});
  m.Node("Shape", "shape", {"input"}, {"s"});
  m.InitInt64("zero", {0});
  m.InitInt64("two", {2});
  m.InitInt64("six", {6});
  m.InitInt64("axes0", {0});
  m.Node("Gather", "batch", {"s", "zero"}, {"b"});  // [B] (a 1-D index keeps the axis)
  m.Node("Mul", "twice", {"b", "two"}, {"b2"});
  m.Node("Concat", "target", {"b2", "six"}, {"t"});
  ModelMaker::IntAttr(m.model().mutable_graph()->mutable_node(3), "axis", 0);
  m.Node("Reshape", "view", {"input", "t"}, {"v"});
  // Then a Transpose, a Slice of the last axis and a scalar Gather.
  ModelMaker::IntsAttr(m.Node("Transpose", "t1", {"v"}, {"vt"}), "perm", {1, 0});  // [6, 2B]
  m.InitInt64("one", {1});
  m.InitInt64("four", {4});
  m.Node("Slice", "rows", {"vt", "one", "four", "axes0"}, {"r"});  // rows 1..3: [3, 2B]
  m.Output("r");
  for (int64_t batch : {1, 3}) {
    Tensor x = RandomBatch(TensorShape({batch, 3, 4}), 7);
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 3, 4}, x, "r");
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->shape(), TensorShape({3, 2 * batch}));
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 2 * batch; ++j) {
        EXPECT_EQ(y->data<float>()[i * 2 * batch + j], x.data<float>()[j * 6 + i + 1]);
      }
    }
  }
}

// Known values of any rank slice (along any axis, any step, ONNX's
// clamping of out-of-range starts and ends, steps up to INT64_MIN/MAX
// without overflow) and transpose at import time, as PyTorch's pad
// arithmetic needs: the folded value is read back as a constant added to
// the input.
TEST(OnnxImportTest, KnownValuesSliceAndTransposeAtAnyRank) {
  // `width`: how many elements the slice keeps (2 a row).
  auto folded = [](int64_t start, int64_t end, int64_t step, int64_t width) -> absl::StatusOr<std::vector<float>> {
    ModelMaker m;
    m.Input("input", {-1, width});
    m.InitInt64("flat", {1, 2, 3, 4, 5, 6});
    m.InitInt64("rows", {3, 2});
    m.InitInt64("flat_shape", {-1});
    m.InitInt64("start", {start});
    m.InitInt64("end", {end});
    m.InitInt64("axis", {0});
    m.InitInt64("step", {step});
    m.Node("Reshape", "matrix", {"flat", "rows"}, {"mat"});                              // [[1,2],[3,4],[5,6]]
    m.Node("Slice", "pick", {"mat", "start", "end", "axis", "step"}, {"picked"});       // rows
    ModelMaker::IntsAttr(m.Node("Transpose", "swap", {"picked"}, {"t"}), "perm", {1, 0});
    m.Node("Reshape", "back", {"t", "flat_shape"}, {"v"});
    ModelMaker::IntAttr(m.Node("Cast", "to_float", {"v"}, {"c"}), "to", onnx::TensorProto::FLOAT);
    m.Node("Add", "add", {"input", "c"}, {"y"});
    m.Output("y");
    Tensor zero(DT_FLOAT, TensorShape({1, width}));
    std::fill(zero.data<float>(), zero.data<float>() + width, 0.0f);
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, width}, zero, "y");
    if (!y.ok()) return y.status();
    return std::vector<float>(y->data<float>(), y->data<float>() + y->NumElements());
  };
  // PyTorch's: rows reversed (start -1, end "before the start", step -1), transposed.
  absl::StatusOr<std::vector<float>> reversed = folded(-1, INT64_MIN, -1, 6);
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  EXPECT_THAT(*reversed, testing::ElementsAre(5, 3, 1, 6, 4, 2));
  // One row each: a step past the end, either way.
  absl::StatusOr<std::vector<float>> first = folded(0, INT64_MAX, INT64_MAX, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(*first, testing::ElementsAre(1, 2));
  absl::StatusOr<std::vector<float>> last = folded(INT64_MAX, INT64_MIN, INT64_MIN, 2);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(*last, testing::ElementsAre(5, 6));
  absl::StatusOr<std::vector<float>> zero_step = folded(0, 2, 0, 4);
  ASSERT_FALSE(zero_step.ok());
  EXPECT_THAT(zero_step.status().message(), HasSubstr("ONNX node pick (Slice): step 0"));
}

TEST(OnnxImportTest, WhatCannotBeFoldedIsRefusedNamingTheNode) {
  {
    // Indices computed at run time (an embedding lookup of token ids).
    ModelMaker m;
    m.Input("input", {-1, 4});
    m.Weight("table", {10, 3});
    m.Node("Gather", "lookup", {"table", "input"}, {"y"});
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 4}, RandomBatch(TensorShape({1, 4}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node lookup (Gather): indices computed at run time"));
  }
  {
    // A reshape whose size depends on the batch in a way one -1 cannot say.
    ModelMaker m;
    m.Input("input", {-1, 6});
    m.InitInt64("shape", {-1, 4});
    m.Node("Reshape", "split", {"input", "shape"}, {"y"});
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 6}, RandomBatch(TensorShape({2, 6}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node split (Reshape): reshaping [?,6] to [?,4] splits the batch"));
  }
  {
    // Arithmetic on the batch size other than scaling it.
    ModelMaker m;
    m.Input("input", {-1, 6});
    m.Node("Shape", "shape", {"input"}, {"s"});
    m.InitInt64("one", {1});
    m.Node("Add", "plus_one", {"s", "one"}, {"t"});
    m.Node("Reshape", "view", {"input", "t"}, {"y"});
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 6}, RandomBatch(TensorShape({2, 6}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node plus_one (Add): arithmetic on the batch size"));
  }
  {
    // A hostile ConstantOfShape: 2^40 elements are never allocated.
    ModelMaker m;
    m.Input("input", {-1, 2});
    m.InitInt64("huge", {int64_t{1} << 20, int64_t{1} << 20});
    m.Node("ConstantOfShape", "fill", {"huge"}, {"c"});
    m.Node("Add", "add", {"input", "c"}, {"y"});
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 2}, RandomBatch(TensorShape({1, 2}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node fill (ConstantOfShape)"));
  }
}

TEST(OnnxImportTest, UnsupportedAttributesAreRefusedNamingTheNode) {
  {
    ModelMaker m;
    m.Input("input", {-1, 4, 6, 6});
    m.Weight("w", {4, 1, 3, 3});
    onnx::NodeProto* n = m.Node("Conv", "depthwise", {"input", "w"}, {"y"});
    ModelMaker::IntAttr(n, "group", 4);
    auto* a = n->add_attribute();
    a->set_name("auto_pad");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("FULL");
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 4, 6, 6}, RandomBatch(TensorShape({1, 4, 6, 6}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node depthwise (Conv): auto_pad FULL is not supported"));
  }
  {
    // 6 + 0 - 3 is not a multiple of 2: ceil_mode would add a window.
    ModelMaker m;
    m.Input("input", {-1, 2, 6, 6});
    onnx::NodeProto* n = m.Node("AveragePool", "pool", {"input"}, {"y"});
    ModelMaker::IntsAttr(n, "kernel_shape", {3, 3});
    ModelMaker::IntsAttr(n, "strides", {2, 2});
    ModelMaker::IntAttr(n, "ceil_mode", 1);
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 2, 6, 6}, RandomBatch(TensorShape({1, 2, 6, 6}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node pool (AveragePool): ceil_mode 1 is not supported"));
  }
  {
    ModelMaker m;
    m.Input("input", {-1, 2, 6, 6});
    m.Weight("w", {4, 2, 3, 3});
    ModelMaker::IntAttr(m.Node("Conv", "conv", {"input", "w"}, {"y"}), "group", 3);
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 2, 6, 6}, RandomBatch(TensorShape({1, 2, 6, 6}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node conv (Conv): group 3 does not divide"));
  }
  {
    ModelMaker m;
    m.Input("input", {-1, 3, 4});
    m.Weight("b", {2, 4});
    m.Node("Mul", "mul", {"input", "b"}, {"y"});
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 3, 4}, RandomBatch(TensorShape({1, 3, 4}), 1), "y");
    ASSERT_FALSE(y.ok());
    EXPECT_THAT(y.status().message(), HasSubstr("ONNX node mul (Mul): shapes [?,3,4] and [2,4] do not broadcast"));
  }
}

// A zero Pad before a Conv (pads as a constant input, opset 18's axes
// too) computes as the Conv with that much more padding; every other Pad
// is refused, naming the node.
TEST(OnnxImportTest, AZeroPadBeforeAConvIsItsPadding) {
  auto model = [](bool pad_node, bool axes) {
    ModelMaker m;
    m.model().mutable_opset_import(0)->set_version(18);
    m.Input("input", {-1, 2, 5, 6});
    m.Weight("w", {3, 2, 3, 3});
    std::string x = "input";
    if (pad_node) {
      // top 1, left 2, bottom 0, right 1
      if (axes) {
        m.InitInt64("pads", {1, 2, 0, 1});
        m.InitInt64("axes", {-2, 3});
      } else {
        m.InitInt64("pads", {0, 0, 1, 2, 0, 0, 0, 1});
      }
      m.Node("Pad", "pad", axes ? std::vector<std::string>{"input", "pads", "", "axes"} : std::vector<std::string>{"input", "pads"}, {"p"});
      x = "p";
    }
    auto* conv = m.Node("Conv", "conv", {x, "w"}, {"y"});
    ModelMaker::IntsAttr(conv, "pads", pad_node ? std::vector<int64_t>{1, 0, 1, 1} : std::vector<int64_t>{2, 2, 1, 2});
    ModelMaker::IntsAttr(conv, "strides", {2, 1});
    m.Output("y");
    return m;
  };
  Tensor x = RandomBatch(TensorShape({2, 2, 5, 6}), 4);
  absl::StatusOr<Tensor> want = Forward(model(false, false).model(), {-1, 2, 5, 6}, x, "y");
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->shape(), TensorShape({2, 3, 3, 8}));  // (5+3-3)/2+1, 6+4-3+1
  for (bool axes : {false, true}) {
    OnnxImport imported;
    absl::StatusOr<Tensor> y = Forward(model(true, axes).model(), {-1, 2, 5, 6}, x, "y", &imported);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->shape(), want->shape());
    for (int64_t i = 0; i < y->NumElements(); ++i) EXPECT_EQ(y->data<float>()[i], want->data<float>()[i]) << i;
  }

  // Refused: another mode, another value, a reader other than a Conv.
  struct Case {
    std::string mode;
    float value;
    std::string reader;
    std::string error;
  };
  for (const Case& c : {Case{"reflect", 0, "Conv", "ONNX node pad (Pad): mode reflect is not supported (only constant)"},
                        Case{"constant", 1, "Conv", "ONNX node pad (Pad): constant_value 1 is not supported (only 0)"},
                        Case{"constant", 0, "MaxPool", "ONNX node pad (Pad): read by ONNX node reader (MaxPool); a Pad is "
                                                       "only supported where every reader is a Conv"}}) {
    SCOPED_TRACE(c.error);
    ModelMaker m;
    m.Input("input", {-1, 2, 5, 6});
    m.Weight("w", {3, 2, 3, 3});
    m.InitInt64("pads", {0, 0, 1, 1, 0, 0, 1, 1});
    m.Init("value", {}, {c.value});
    onnx::NodeProto* pad = m.Node("Pad", "pad", {"input", "pads", "value"}, {"p"});
    auto* a = pad->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(c.mode);
    onnx::NodeProto* r = m.Node(c.reader, "reader", c.reader == "Conv" ? std::vector<std::string>{"p", "w"} : std::vector<std::string>{"p"}, {"y"});
    if (c.reader == "MaxPool") ModelMaker::IntsAttr(r, "kernel_shape", {2, 2});
    m.Output("y");
    absl::StatusOr<Tensor> y = Forward(m.model(), {-1, 2, 5, 6}, x, "y");
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(y.status().message(), HasSubstr(c.error));
  }
}

// BatchNormalization normalises with the batch's statistics in a training
// step and with its running statistics (two moving-average variables made
// from the file's initializers) in evaluation; a graph that reads the
// running statistics the node would output is refused, naming them, and so
// is a momentum out of [0, 1].
TEST(OnnxImportTest, BatchNormTrainsOnTheBatchAndEvaluatesOnMovingStatistics) {
  auto make = [](bool read_running, float momentum) {
    ModelMaker m;
    m.Input("input", {-1, 2, 3, 3});
    m.Init("scale", {2}, {2.0f, 0.5f});
    m.Init("B", {2}, {1.0f, -1.0f});
    m.Init("mean", {2}, {100.0f, -3.0f});
    m.Init("var", {2}, {4.0f, 0.25f});
    onnx::NodeProto* n = m.Node("BatchNormalization", "bn", {"input", "scale", "B", "mean", "var"},
                                {"y", "running_mean", "running_var"});
    ModelMaker::IntAttr(n, "training_mode", 1);
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("momentum");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(momentum);
    m.Output("y");
    if (read_running) m.Node("Identity", "read", {"running_mean"}, {"rm"});
    return m;
  };
  const Tensor x = RandomBatch(TensorShape({4, 2, 3, 3}), 3);
  {
    absl::StatusOr<Tensor> y = Forward(make(true, 0.9f).model(), {-1, 2, 3, 3}, x, "rm");
    ASSERT_FALSE(y.ok());
    EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(y.status().message(),
                HasSubstr("ONNX node bn (BatchNormalization): output 1 (the updated running statistics) is read"));
  }
  for (float bad : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    absl::StatusOr<Tensor> y = Forward(make(false, bad).model(), {-1, 2, 3, 3}, x, "y");
    ASSERT_FALSE(y.ok()) << bad;
    EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(y.status().message(), HasSubstr("is not in [0, 1]"));
  }
  // Training: per channel over batch and positions, mean B and standard
  // deviation |scale|, whatever the running statistics.
  OnnxImport imported;
  absl::StatusOr<Tensor> y = Forward(make(false, 0.75f).model(), {-1, 2, 3, 3}, x, "y", &imported, /*training=*/true);
  ASSERT_TRUE(y.ok()) << y.status();
  for (int ch = 0; ch < 2; ++ch) {
    double sum = 0, sq = 0;
    for (int b = 0; b < 4; ++b) {
      for (int p = 0; p < 9; ++p) {
        const double v = y->data<float>()[(b * 2 + ch) * 9 + p];
        sum += v;
        sq += v * v;
      }
    }
    const double mean = sum / 36, sd = std::sqrt(sq / 36 - mean * mean);
    EXPECT_NEAR(mean, ch == 0 ? 1.0 : -1.0, 1e-5) << ch;
    EXPECT_NEAR(sd, ch == 0 ? 2.0 : 0.5, 1e-3) << ch;
  }
  // The running statistics became moving-average variables with the
  // node's momentum; the step reports the batch's mean (output 1) and
  // unbiased variance (output 3) for them.
  int moving = 0;
  for (const VariableDef& v : imported.variables) {
    if (!v.has_moving_average()) continue;
    ++moving;
    EXPECT_FLOAT_EQ(v.moving_average().momentum(), 0.75f) << v.name();
    ASSERT_TRUE(imported.moving_statistics.count(v.name())) << v.name();
    EXPECT_THAT(imported.moving_statistics[v.name()], ::testing::EndsWith(v.name() == imported.variable_of["mean"] ? ":1" : ":3"));
  }
  EXPECT_EQ(moving, 2);
  EXPECT_TRUE(imported.variable_of.count("mean") && imported.variable_of.count("var"));
  // Evaluation: (x - running_mean) / sqrt(running_var + eps) * scale + B.
  y = Forward(make(false, 0.75f).model(), {-1, 2, 3, 3}, x, "y", nullptr, /*training=*/false);
  ASSERT_TRUE(y.ok()) << y.status();
  const float rm[2] = {100.0f, -3.0f}, rv[2] = {4.0f, 0.25f}, sc[2] = {2.0f, 0.5f}, bias[2] = {1.0f, -1.0f};
  for (int i = 0; i < x.NumElements(); ++i) {
    const int ch = (i / 9) % 2;
    const float want = (x.data<float>()[i] - rm[ch]) / std::sqrt(rv[ch] + 1e-5f) * sc[ch] + bias[ch];
    EXPECT_NEAR(y->data<float>()[i], want, 1e-4f * std::max(1.0f, std::fabs(want))) << i;
  }
}

// The file as CompileModel reads it: a job with a loss on "logits".
class OnnxJobTest : public ::testing::Test {
 protected:
  std::string Write(const onnx::ModelProto& m, const std::string& bytes_override = "") {
    std::string path = ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".onnx";
    std::ofstream out(path, std::ios::binary);
    std::string bytes = bytes_override.empty() ? m.SerializeAsString() : bytes_override;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  TrainingJob Job(const std::string& path) {
    TrainingJob job;
    auto* o = job.mutable_model()->mutable_onnx();
    o->set_path(path);
    o->set_output("logits");
    job.mutable_model()->add_metric("accuracy");
    auto* f = job.mutable_input()->add_feature();
    f->set_name("image");
    for (int64_t d : {4, 4, 1}) f->add_shape(d);
    job.mutable_input()->set_num_classes(3);
    job.set_seed(7);
    return job;
  }
};

TEST_F(OnnxJobTest, CompilesWithLossAndGradientsAndPrunesTheUnusedHead) {
  ModelMaker m = Mlp();
  absl::StatusOr<CompiledModel> c = CompileModel(Job(Write(m.model())));
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::string> names;
  for (const VariableDef& v : c->variables) names.push_back(v.name());
  EXPECT_THAT(names, testing::UnorderedElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
  EXPECT_EQ(c->gradients.size(), 4u);
  for (const NodeDef& n : c->graph.node()) {
    EXPECT_THAT(n.name(), testing::Not(HasSubstr("aux"))) << "the unused head's node reached the graph";
  }
  EXPECT_TRUE(c->metrics.count("accuracy"));
}

TEST_F(OnnxJobTest, ALastLogSoftmaxFoldsIntoTheLoss) {
  ModelMaker m = Mlp();
  m.model().mutable_graph()->mutable_node(3)->set_output(0, "z");
  m.Node("LogSoftmax", "/LogSoftmax", {"z"}, {"logits"});
  absl::StatusOr<CompiledModel> c = CompileModel(Job(Write(m.model())));
  ASSERT_TRUE(c.ok()) << c.status();
  for (const NodeDef& n : c->graph.node()) EXPECT_NE(n.op(), "LogSoftmax");
}

TEST_F(OnnxJobTest, BadJobsAreRefusedSayingWhy) {
  ModelMaker m = Mlp();
  TrainingJob job = Job(Write(m.model()));
  job.mutable_model()->mutable_onnx()->set_output("nope");
  EXPECT_THAT(CompileModel(job).status().message(), HasSubstr("output \"nope\" is no node's output"));
  job = Job(Write(m.model()));
  job.mutable_model()->mutable_onnx()->set_output("");  // two graph outputs
  EXPECT_THAT(CompileModel(job).status().message(), HasSubstr("say which the loss reads"));
  job = Job(Write(m.model()));
  auto* b = job.mutable_model()->mutable_onnx()->add_input();
  b->set_input("input");
  b->set_feature("pixels");
  EXPECT_THAT(CompileModel(job).status().message(), HasSubstr("\"pixels\" is no DENSE input feature"));
  job = Job(Write(m.model()));
  job.mutable_input()->set_num_classes(10);
  EXPECT_THAT(CompileModel(job).status().message(), HasSubstr("input.num_classes is 10"));
  job = Job("/nonexistent/model.onnx");
  EXPECT_EQ(CompileModel(job).status().code(), absl::StatusCode::kNotFound);
}

// Hostile files: each is an error, never a crash or a huge allocation.
TEST_F(OnnxJobTest, HostileFilesAreErrors) {
  ModelMaker good = Mlp();
  const std::string bytes = good.model().SerializeAsString();
  auto compile = [&](const onnx::ModelProto& m, const std::string& raw = "") { return CompileModel(Job(Write(m, raw))).status(); };

  // Truncated.
  absl::Status s = compile(good.model(), bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("does not parse"));

  // Huge dims with a few bytes of data.
  ModelMaker huge = Mlp();
  auto* t = huge.model().mutable_graph()->mutable_initializer(0);
  t->clear_dims();
  t->add_dims(int64_t{1} << 40);
  t->add_dims(int64_t{1} << 40);
  s = compile(huge.model());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("fc1.weight"));

  // Data of the wrong size.
  ModelMaker shortdata = Mlp();
  shortdata.model().mutable_graph()->mutable_initializer(1)->set_raw_data("0123456789");
  s = compile(shortdata.model());
  EXPECT_THAT(s.message(), HasSubstr("ONNX node /fc1/Gemm (Gemm): initializer \"fc1.bias\""));

  // Negative dims, a wrong dtype, external data.
  ModelMaker negative = Mlp();
  negative.model().mutable_graph()->mutable_initializer(1)->set_dims(0, -8);
  EXPECT_THAT(compile(negative.model()).message(), HasSubstr("negative dim"));
  ModelMaker dtype = Mlp();
  dtype.model().mutable_graph()->mutable_initializer(1)->set_data_type(onnx::TensorProto::DOUBLE);
  EXPECT_THAT(compile(dtype.model()).message(), HasSubstr("data type 11 is not supported"));
  ModelMaker external = Mlp();
  external.model().mutable_graph()->mutable_initializer(0)->set_data_location(onnx::TensorProto::EXTERNAL);
  EXPECT_THAT(compile(external.model()).message(), HasSubstr("external file"));

  // A weight of the wrong shape, an input nothing produces, a cycle.
  ModelMaker shape = Mlp();
  shape.model().mutable_graph()->mutable_initializer(2)->set_dims(1, 9);
  shape.model().mutable_graph()->mutable_initializer(2)->set_raw_data(std::string(3 * 9 * 4, '\0'));
  EXPECT_THAT(compile(shape.model()).message(), HasSubstr("/fc2/Gemm (Gemm): inner dimensions differ"));
  ModelMaker dangling = Mlp();
  dangling.model().mutable_graph()->mutable_node(2)->set_input(0, "missing");
  EXPECT_THAT(compile(dangling.model()).message(), HasSubstr("/Relu (Relu): input \"missing\" is no graph input"));
  ModelMaker cycle = Mlp();
  cycle.model().mutable_graph()->mutable_node(0)->set_input(0, "hr");
  EXPECT_FALSE(compile(cycle.model()).ok());

  // Reshape to an absurd shape.
  ModelMaker reshape;
  reshape.Input("input", {-1, 4, 4, 1});
  reshape.InitInt64("shape", {0, int64_t{1} << 62});
  reshape.Node("Reshape", "/Reshape", {"input", "shape"}, {"logits"});
  reshape.Output("logits");
  EXPECT_THAT(compile(reshape.model()).message(), HasSubstr("/Reshape (Reshape)"));

  // Random corruption of every kind: errors or a model, never a crash.
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string mutated = bytes;
    for (int k = 0; k < 1 + i % 8; ++k) mutated[rng() % mutated.size()] = static_cast<char>(rng());
    (void)compile(good.model(), mutated);
  }
}

}  // namespace
}  // namespace psrt
