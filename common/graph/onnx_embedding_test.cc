// ONNX models with token-id inputs: an integer graph input fed by a job's
// id feature (dtype: DT_INT64), looked up by a Gather on a float
// initializer (what PyTorch's nn.Embedding exports). Under the
// parameter-server strategy the table is a FIXED_TABLE pulled and pushed by
// the batch's unique ids; under mirrored strategies a dense variable. Both
// compute the same loss and gradients; bad bindings and ids are refused
// naming what was wrong.
#include <cmath>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/compute/executor.h"
#include "common/compute/graph_step_runner.h"
#include "common/graph/model_compiler.h"
#include "common/graph/onnx_import.h"
#include "common/input/example.h"
#include "common/plan/job_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kRows = 6, kDim = 4, kLen = 3, kClasses = 3;

void AddInput(onnx::GraphProto* g, const std::string& name, int elem, const std::vector<int64_t>& dims) {
  auto* t = g->add_input();
  t->set_name(name);
  auto* tt = t->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

void AddInit(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims, uint32_t seed) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int64_t i = 0; i < n; ++i) t->add_float_data(u(rng));
}

void IntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                         const std::vector<std::string>& in, const std::string& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& s : in) n->add_input(s);
  n->add_output(out);
  return n;
}

// ids [b, 3] (INT64) -> Gather(emb.weight [6, 4]) [b, 3, 4] + pos [3, 4]
// -> ReduceMean over the tokens -> Gemm(head [3, 4], transB) -> "logits".
// `tie`: the head reads emb.weight's first 3 rows too (tied weights).
onnx::ModelProto TokenModel(bool tie = false) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "ids", onnx::TensorProto::INT64, {kLen});
  AddInit(g, "emb.weight", {kRows, kDim}, 1);
  AddInit(g, "pos", {kLen, kDim}, 2);
  AddInit(g, "head.weight", {kClasses, kDim}, 3);
  AddInit(g, "head.bias", {kClasses}, 4);
  AddNode(g, "Gather", "/emb/Gather", {"emb.weight", "ids"}, "tok");
  AddNode(g, "Add", "/Add", {"tok", "pos"}, "x");
  auto* mean = AddNode(g, "ReduceMean", "/ReduceMean", {"x"}, "pooled");
  auto* axes = mean->add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(1);
  IntAttr(mean, "keepdims", 0);
  IntAttr(AddNode(g, "Gemm", "/head/Gemm", {"pooled", "head.weight", "head.bias"}, tie ? "h" : "logits"), "transB", 1);
  if (tie) {
    // logits = h + pooled . emb.weight[0:3]^T, the table read whole.
    IntAttr(AddNode(g, "Gemm", "/tied/Gemm", {"pooled", "emb.weight"}, "tied"), "transB", 1);
    auto* s = g->add_initializer();
    s->set_name("tied.slice");
    s->set_data_type(onnx::TensorProto::INT64);
    s->add_dims(3);
    for (int64_t i : {0, 1, 2}) s->add_int64_data(i);
    IntAttr(AddNode(g, "Gather", "/tied/Gather", {"tied", "tied.slice"}, "tied3"), "axis", 1);
    AddNode(g, "Add", "/tied/Add", {"h", "tied3"}, "logits");
  }
  g->add_output()->set_name("logits");
  return m;
}

class OnnxEmbeddingTest : public ::testing::Test {
 protected:
  std::string Write(const onnx::ModelProto& m) {
    std::string path =
        ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".onnx";
    std::ofstream out(path, std::ios::binary);
    const std::string bytes = m.SerializeAsString();
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  TrainingJob Job(const std::string& path, bool mirrored) {
    TrainingJob job;
    auto* o = job.mutable_model()->mutable_onnx();
    o->set_path(path);
    o->set_output("logits");
    job.mutable_model()->add_metric("accuracy");
    auto* f = job.mutable_input()->add_feature();
    f->set_name("tokens");
    f->add_shape(kLen);
    f->set_dtype(DT_INT64);
    job.mutable_input()->set_num_classes(kClasses);
    job.mutable_input()->set_batch_size(4);
    if (mirrored) job.mutable_strategy()->mutable_multi_worker_mirrored();
    return job;
  }
  // 4 examples of 3 ids, with repeats (unique ids: 2, 5, 0, 3).
  Batch MakeTokens(std::vector<int64_t> ids = {2, 5, 2, 0, 0, 3, 5, 5, 5, 3, 2, 0}) {
    Batch b;
    b.size = 4;
    b.tensors["tokens"] = Tensor::FromVector<int64_t>(ids, TensorShape({4, kLen}));
    b.tensors["label"] = Tensor::FromVector<int64_t>({0, 2, 1, 2}, TensorShape({4}));
    return b;
  }
  // The variables' initial values, from the plan (the file's tensors).
  static std::map<std::string, Tensor> Initial(const JobPlan& plan) {
    std::map<std::string, Tensor> out;
    for (const VariablePlacement& vp : plan.placement.variable()) {
      out[vp.variable().name()] = *Tensor::FromProto(vp.variable().initializer().tensor());
    }
    return out;
  }
};

TEST_F(OnnxEmbeddingTest, UnderThePsTheTableIsPulledAndPushedByRows) {
  absl::StatusOr<JobPlan> plan = PlanJob(Job(Write(TokenModel()), false), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int tables = 0;
  for (const VariablePlacement& vp : plan->placement.variable()) {
    if (vp.variable().name() != "emb.weight") {
      EXPECT_EQ(vp.variable().kind(), VariableDef::DENSE) << vp.variable().name();
      continue;
    }
    ++tables;
    EXPECT_EQ(vp.variable().kind(), VariableDef::FIXED_TABLE);
    EXPECT_THAT(vp.variable().shape().dim(), testing::ElementsAre(kRows, kDim));
    EXPECT_EQ(vp.variable().initializer().kind(), InitializerDef::TENSOR);
  }
  EXPECT_EQ(tables, 1);
  // The feature's placeholder is not in the step's graph: the lookup reads
  // the index of each id among the batch's unique ones.
  for (const NodeDef& n : plan->graph.node()) EXPECT_NE(n.name(), "tokens");

  absl::StatusOr<std::unique_ptr<GraphStepRunner>> runner =
      GraphStepRunner::Create(AssignmentOf(Job("", false), *plan), 1);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_THAT((*runner)->DenseVariables(), testing::UnorderedElementsAre("pos", "head.weight", "head.bias"));
  Batch batch = MakeTokens();
  absl::StatusOr<RowRequest> want = (*runner)->SparseRows(batch);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), 1u);
  const Tensor& unique = want->at("emb.weight");
  EXPECT_THAT(std::vector<int64_t>(unique.data<int64_t>(), unique.data<int64_t>() + unique.NumElements()),
              testing::ElementsAre(2, 5, 0, 3));
  std::map<std::string, Tensor> init = Initial(*plan);
  const Tensor& table = init.at("emb.weight");
  Tensor rows(DT_FLOAT, TensorShape({unique.NumElements(), kDim}));
  for (int64_t i = 0; i < unique.NumElements(); ++i) {
    for (int64_t k = 0; k < kDim; ++k) rows.data<float>()[i * kDim + k] = table.data<float>()[unique.data<int64_t>()[i] * kDim + k];
  }
  TensorMap dense;
  for (const std::string& v : (*runner)->DenseVariables()) dense[v] = init.at(v);
  absl::StatusOr<StepResult> step = (*runner)->Run(dense, {{"emb.weight", rows}}, batch, 0);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->sparse_gradients.count("emb.weight"));
  const auto& [ids, grad_rows] = step->sparse_gradients.at("emb.weight");
  EXPECT_EQ(ids.NumElements(), 4);
  EXPECT_EQ(grad_rows.shape(), TensorShape({4, kDim}));

  // The same model under multi_worker_mirrored: the table is dense, looked
  // up whole; loss and gradients are the same.
  absl::StatusOr<JobPlan> mirrored = PlanJob(Job(Write(TokenModel()), true), 0);
  ASSERT_TRUE(mirrored.ok()) << mirrored.status();
  for (const VariablePlacement& vp : mirrored->placement.variable()) {
    EXPECT_EQ(vp.variable().kind(), VariableDef::DENSE) << vp.variable().name();
  }
  absl::StatusOr<std::unique_ptr<GraphStepRunner>> whole =
      GraphStepRunner::Create(AssignmentOf(Job("", true), *mirrored), 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  TensorMap all = init;
  absl::StatusOr<StepResult> dense_step = (*whole)->Run(all, {}, batch, 0);
  ASSERT_TRUE(dense_step.ok()) << dense_step.status();
  EXPECT_FLOAT_EQ(step->loss, dense_step->loss);
  const Tensor& g = dense_step->dense_gradients.at("emb.weight");
  ASSERT_EQ(g.shape(), TensorShape({kRows, kDim}));
  for (int64_t r = 0; r < kRows; ++r) {
    int64_t at = -1;
    for (int64_t i = 0; i < ids.NumElements(); ++i) {
      if (ids.data<int64_t>()[i] == r) at = i;
    }
    for (int64_t k = 0; k < kDim; ++k) {
      const float want_g = g.data<float>()[r * kDim + k];
      const float got = at < 0 ? 0.0f : grad_rows.data<float>()[at * kDim + k];
      EXPECT_NEAR(got, want_g, 1e-6) << "row " << r;
      if (at < 0) {
        EXPECT_EQ(want_g, 0.0f) << "row " << r << " is in no example";
      }
    }
  }
  for (const char* v : {"pos", "head.weight", "head.bias"}) {
    const Tensor& a = step->dense_gradients.at(v);
    const Tensor& b = dense_step->dense_gradients.at(v);
    ASSERT_EQ(a.shape(), b.shape()) << v;
    for (int64_t i = 0; i < a.NumElements(); ++i) EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 1e-6) << v;
  }
  // ReduceMean over the 3 tokens of (table row + pos): the forward pass by hand.
  const Tensor& head = init.at("head.weight");
  const Tensor& bias = init.at("head.bias");
  const Tensor& pos = init.at("pos");
  const std::vector<int64_t> flat = {2, 5, 2, 0, 0, 3, 5, 5, 5, 3, 2, 0};
  const std::vector<int64_t> labels = {0, 2, 1, 2};
  double loss = 0;
  for (int b = 0; b < 4; ++b) {
    std::vector<double> pooled(kDim, 0), logits(kClasses, 0);
    for (int t = 0; t < kLen; ++t) {
      for (int k = 0; k < kDim; ++k) {
        pooled[k] += (table.data<float>()[flat[b * kLen + t] * kDim + k] + pos.data<float>()[t * kDim + k]) / kLen;
      }
    }
    double z = 0;
    for (int c = 0; c < kClasses; ++c) {
      logits[c] = bias.data<float>()[c];
      for (int k = 0; k < kDim; ++k) logits[c] += pooled[k] * head.data<float>()[c * kDim + k];
      z += std::exp(logits[c]);
    }
    loss += std::log(z) - logits[labels[b]];
  }
  EXPECT_NEAR(step->loss, loss / 4, 1e-5);
}

TEST_F(OnnxEmbeddingTest, IdsOutsideTheTableAreRefusedNamingTheFeatureAndTable) {
  absl::StatusOr<JobPlan> plan = PlanJob(Job(Write(TokenModel()), false), 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::unique_ptr<GraphStepRunner>> runner =
      GraphStepRunner::Create(AssignmentOf(Job("", false), *plan), 1);
  ASSERT_TRUE(runner.ok()) << runner.status();
  for (int64_t bad : {kRows, int64_t{-1}, int64_t{1} << 40}) {
    absl::Status s = (*runner)->SparseRows(MakeTokens({2, 5, 2, 0, bad, 3, 5, 5, 5, 3, 2, 0})).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("feature \"tokens\": id ", bad, " (value 4 of the batch) is outside "
                                                    "table emb.weight's rows [0, 6)")));
  }
  // Evaluation reads whole tables: the same check, before the lookup.
  std::map<std::string, Tensor> init = Initial(*plan);
  absl::Status s = (*runner)->Evaluate(init, MakeTokens({2, 5, 2, 0, 9, 3, 5, 5, 5, 3, 2, 0})).status();
  EXPECT_THAT(s.message(), HasSubstr("id 9 (value 4 of the batch) is outside table emb.weight's rows"));

  // Mirrored: the kernel refuses it (never reads past the table).
  absl::StatusOr<JobPlan> mirrored = PlanJob(Job(Write(TokenModel()), true), 0);
  ASSERT_TRUE(mirrored.ok()) << mirrored.status();
  absl::StatusOr<std::unique_ptr<GraphStepRunner>> whole =
      GraphStepRunner::Create(AssignmentOf(Job("", true), *mirrored), 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<StepResult> r = (*whole)->Run(init, {}, MakeTokens({2, 5, 2, 0, 6, 3, 5, 5, 5, 3, 2, 0}), 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("index 6 out of range [0, 6)"));
}

TEST_F(OnnxEmbeddingTest, ATableAlsoReadWholeStaysDense) {
  absl::StatusOr<CompiledModel> c = CompileModel(Job(Write(TokenModel(/*tie=*/true)), false));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tables.empty());
  for (const VariableDef& v : c->variables) EXPECT_EQ(v.kind(), VariableDef::DENSE) << v.name();
  bool lookup = false;
  for (const NodeDef& n : c->graph.node()) {
    if (n.op() == "EmbeddingLookup") {
      lookup = true;
      EXPECT_EQ(n.input(0), "emb.weight");
      EXPECT_EQ(n.input(1), "tokens");
    }
  }
  EXPECT_TRUE(lookup);
}

TEST_F(OnnxEmbeddingTest, BadBindingsAndUsesAreRefusedNamingTheInput) {
  // A float feature for the integer input, and the other way round.
  TrainingJob job = Job(Write(TokenModel()), false);
  job.mutable_input()->mutable_feature(0)->set_dtype(DT_FLOAT);
  absl::Status s = CompileModel(job).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("ONNX graph input \"ids\" is integer ids but its feature \"tokens\" is float"));
  onnx::ModelProto floats = TokenModel();
  floats.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  s = CompileModel(Job(Write(floats), false)).status();
  EXPECT_THAT(s.message(), HasSubstr("ONNX graph input \"ids\" is FLOAT but its feature \"tokens\" is integer ids"));
  // A shape that differs.
  job = Job(Write(TokenModel()), false);
  job.mutable_input()->mutable_feature(0)->set_shape(0, 4);
  s = CompileModel(job).status();
  EXPECT_THAT(s.message(), HasSubstr("ONNX graph input \"ids\" is [?,3] but its feature \"tokens\" is [?,4]"));
  // Ids used as data.
  onnx::ModelProto data = TokenModel();
  data.mutable_graph()->mutable_node(1)->set_input(0, "ids");
  s = CompileModel(Job(Write(data), false)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("ONNX node /Add (Add): input 0 (\"ids\") is integer ids used as data"));
  // Ids gathered from a computed value, or along another axis.
  onnx::ModelProto computed = TokenModel();
  AddNode(computed.mutable_graph(), "Relu", "/Relu", {"emb.weight"}, "relu");
  computed.mutable_graph()->mutable_node(0)->set_input(0, "relu");
  s = CompileModel(Job(Write(computed), false)).status();
  EXPECT_THAT(s.message(), HasSubstr("(Gather): ids (\"ids\") gathered from \"relu\": only a float initializer"));
  onnx::ModelProto axis = TokenModel();
  IntAttr(axis.mutable_graph()->mutable_node(0), "axis", 1);
  s = CompileModel(Job(Write(axis), false)).status();
  EXPECT_THAT(s.message(), HasSubstr("ONNX node /emb/Gather (Gather): axis 1; ids look up rows (axis 0)"));
}

// The input pipeline's side: an id feature is an int64 batch tensor; a value
// that is no integer is refused naming the feature.
TEST(IdFeatureTest, MakeBatchGivesInt64IdsAndRefusesFractions) {
  InputDef input;
  auto* f = input.add_feature();
  f->set_name("tokens");
  f->add_shape(2);
  f->set_dtype(DT_INT64);
  input.set_num_classes(2);
  input.set_scale(1.0f / 255);  // not applied to ids
  std::vector<Example> ex(2);
  ex[0].features = {FeatureValues{{3.0f, 255.0f}, {}}};
  ex[1].features = {FeatureValues{{}, {int64_t{1} << 40, 7}}};
  absl::StatusOr<Batch> b = MakeBatch(input, ex);
  ASSERT_TRUE(b.ok()) << b.status();
  const Tensor& t = b->tensors.at("tokens");
  ASSERT_EQ(t.dtype(), DT_INT64);
  EXPECT_EQ(t.shape(), TensorShape({2, 2}));
  EXPECT_THAT(std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + 4),
              testing::ElementsAre(3, 255, int64_t{1} << 40, 7));
  ex[1].features = {FeatureValues{{0.5f, 1.0f}, {}}};
  EXPECT_THAT(MakeBatch(input, ex).status().message(),
              HasSubstr("feature \"tokens\" (dtype: DT_INT64): value 0 of example 1 of the batch is 0.5"));
  ex[1].features = {FeatureValues{{1.0f}, {}}};
  EXPECT_THAT(MakeBatch(input, ex).status().message(), HasSubstr("feature \"tokens\" has 1 values, its shape needs 2"));
}

}  // namespace
}  // namespace psrt
