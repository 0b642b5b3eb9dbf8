// ParseJob refuses, naming the field, what would otherwise fail only once
// the cluster runs: the optimizer's schedule and the input's decoding.
#include "common/plan/job_planner.h"

#include <cmath>
#include <fstream>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/graph/model_compiler.h"
#include "google/protobuf/text_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<TrainingJob> Parse(const std::string& optimizer, const std::string& input_extra = "") {
  return ParseJob(absl::StrCat(R"(
    model { sequential { layer { dense { units: 4 } } } loss { kind: MEAN_SQUARED_ERROR } }
    input { format: TFRECORD batch_size: 8 train { files: "/nonexistent.tfrecord" }
            feature { name: "x" shape: 3 } )", input_extra, R"( }
    )", optimizer, " steps: 10"), "job.pbtxt");
}

TEST(JobPlannerTest, ASchedulesWholeJobDecayIsAcceptedAndBadValuesAreNamed) {
  auto ok = Parse("optimizer { adam { learning_rate: 0.001 } schedule { kind: COSINE warmup_steps: 100 } }");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->optimizer().schedule().decay_steps(), 0);  // the chief fills it in, not the parser
  EXPECT_TRUE(Parse("").ok());  // no optimizer: nothing to check here

  const std::pair<std::string, std::string> bad[] = {
      {"schedule { kind: STEP decay_steps: 100 decay_rate: 1.5 }",
       "job.pbtxt: optimizer.schedule.decay_rate must be in (0, 1], got 1.5"},
      {"schedule { kind: STEP decay_steps: -5 decay_rate: 0.5 }", "job.pbtxt: optimizer.schedule.decay_steps must be positive"},
      {"schedule { kind: COSINE min_fraction: 1 }", "job.pbtxt: optimizer.schedule.min_fraction"},
      {"schedule { warmup_steps: -1 }", "job.pbtxt: optimizer.schedule.warmup_steps must be >= 0"},
      {"schedule { kind: 7 }", "job.pbtxt: optimizer.schedule.kind is unknown"},
  };
  for (const auto& [schedule, message] : bad) {
    auto job = Parse(absl::StrCat("optimizer { sgd { learning_rate: 0.1 } ", schedule, " }"));
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << schedule;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(message));
  }
}

TEST(JobPlannerTest, LabelSmoothingIsCheckedNamingTheField) {
  auto job = [](const std::string& loss) {
    return ParseJob(absl::StrCat(R"(
      model { sequential { layer { dense { units: 3 } } } loss { )", loss, R"( } }
      input { format: TFRECORD batch_size: 8 num_classes: 3 train { files: "/nonexistent.tfrecord" }
              feature { name: "x" shape: 3 } }
      steps: 10)"), "job.pbtxt");
  };
  EXPECT_TRUE(job("label_smoothing: 0.1").ok());
  EXPECT_TRUE(job("kind: SIGMOID_CROSS_ENTROPY label_smoothing: 0.5").ok());
  const std::pair<std::string, std::string> bad[] = {
      {"label_smoothing: 1", "job.pbtxt: model.loss.label_smoothing is 1; it must be in [0, 1)"},
      {"label_smoothing: -0.1", "model.loss.label_smoothing is -0.1"},
      {"label_smoothing: nan", "model.loss.label_smoothing is nan"},
      {"kind: MEAN_SQUARED_ERROR label_smoothing: 0.1", "not MEAN_SQUARED_ERROR"},
  };
  for (const auto& [loss, message] : bad) {
    auto j = job(loss);
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << loss;
    EXPECT_THAT(std::string(j.status().message()), HasSubstr(message)) << loss;
  }
}

// Early stopping (#25): refused at parse naming the field.
TEST(JobPlannerTest, EarlyStoppingIsCheckedAtParseNamingTheField) {
  auto job = [](const std::string& eval) {
    return ParseJob(absl::StrCat(R"(
      model { sequential { layer { dense { units: 3 } } } loss { } metric: "accuracy" }
      input { format: TFRECORD batch_size: 8 num_classes: 3 train { files: "/nonexistent.tfrecord" }
              feature { name: "x" shape: 3 } }
      eval { )", eval, R"( }
      steps: 10)"), "job.pbtxt");
  };
  EXPECT_TRUE(job("every_steps: 100 early_stopping { monitor: \"accuracy\" patience: 2 min_delta: 0.001 }").ok());
  EXPECT_TRUE(job("every_steps: 100 early_stopping { monitor: \"loss\" mode: MIN start_from_step: 500 }").ok());
  EXPECT_TRUE(job("early_stopping { patience: 3 }").ok());  // no monitor: no early stopping
  const std::pair<std::string, std::string> bad[] = {
      {"every_steps: 100 early_stopping { monitor: \"auc\" }",
       "job.pbtxt: eval.early_stopping.monitor is \"auc\"; it must be one of \"loss\", \"accuracy\""},
      {"every_steps: 100 early_stopping { monitor: \"loss\" min_delta: -0.1 }", "eval.early_stopping.min_delta is -0.1"},
      {"every_steps: 100 early_stopping { monitor: \"loss\" min_delta: inf }", "eval.early_stopping.min_delta is inf"},
      {"every_steps: 100 early_stopping { monitor: \"loss\" patience: -1 }", "eval.early_stopping.patience is -1"},
      {"every_steps: 100 early_stopping { monitor: \"loss\" start_from_step: -1 }",
       "eval.early_stopping.start_from_step is -1"},
      {"early_stopping { monitor: \"loss\" }", "eval.early_stopping needs periodic evaluations: eval.every_steps is 0"},
  };
  for (const auto& [eval, message] : bad) {
    auto j = job(eval);
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << eval;
    EXPECT_THAT(std::string(j.status().message()), HasSubstr(message)) << eval;
  }
}

// model.metric (#25): Keras' names; an unknown one, or one that does not fit
// the loss, is refused naming it and listing the known ones.
TEST(JobPlannerTest, MetricsAreCheckedAgainstTheLossAtParse) {
  auto job = [](const std::string& loss, const std::string& metric, int classes = 10) {
    return ParseJob(absl::StrCat(R"(
      model { sequential { layer { dense { units: )", classes > 0 ? classes : 1, R"( } } }
              loss { kind: )", loss, R"( } metric: ")", metric, R"(" }
      input { format: TFRECORD batch_size: 8 num_classes: )", classes, R"( train { files: "/nonexistent.tfrecord" }
              feature { name: "x" shape: 3 } }
      steps: 10)"), "job.pbtxt");
  };
  for (const char* m : {"accuracy", "top_k_accuracy", "top_3_accuracy"}) {
    EXPECT_TRUE(job("SOFTMAX_CROSS_ENTROPY", m).ok()) << m << ": " << job("SOFTMAX_CROSS_ENTROPY", m).status();
  }
  for (const char* m : {"mae", "mean_absolute_error", "accuracy"}) EXPECT_TRUE(job("MEAN_SQUARED_ERROR", m, 0).ok()) << m;
  for (const char* m : {"precision", "recall", "auc", "accuracy"}) {
    EXPECT_TRUE(job("SIGMOID_CROSS_ENTROPY", m, 0).ok()) << m << ": " << job("SIGMOID_CROSS_ENTROPY", m, 0).status();
  }
  const std::tuple<std::string, std::string, std::string> bad[] = {
      {"SOFTMAX_CROSS_ENTROPY", "f1", "job.pbtxt: model.metric[0]: \"f1\" is no metric; the metrics are: accuracy, "},
      {"SOFTMAX_CROSS_ENTROPY", "top_0_accuracy", "\"top_0_accuracy\" is no metric (top_<K>_accuracy needs a positive K)"},
      {"SOFTMAX_CROSS_ENTROPY", "top_x_accuracy", "needs a positive K"},
      {"SOFTMAX_CROSS_ENTROPY", "precision", "\"precision\" is a binary metric: it needs a sigmoid cross-entropy loss"},
      {"SOFTMAX_CROSS_ENTROPY", "mae", "\"mae\" is a regression metric"},
      {"SIGMOID_CROSS_ENTROPY", "mean_absolute_error", "is a regression metric"},
      {"MEAN_SQUARED_ERROR", "auc", "\"auc\" is a binary metric"},
      {"MEAN_SQUARED_ERROR", "top_k_accuracy", "needs a softmax cross-entropy loss"},
  };
  for (const auto& [loss, metric, message] : bad) {
    auto j = job(loss, metric, loss == "SOFTMAX_CROSS_ENTROPY" ? 10 : 0);
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << metric;
    EXPECT_THAT(std::string(j.status().message()), HasSubstr(message)) << metric;
    EXPECT_THAT(std::string(j.status().message()), HasSubstr("precision, recall, auc")) << metric;
  }
}

// The evaluation sums each batch's metric statistics and finishes once: on
// a split of 1237 examples, batches of 500, 500 and 237 give the same
// accuracy, precision, recall and AUC as one batch of all of them (a mean
// of the batches' precisions would not).
TEST(JobPlannerTest, EvaluationMetricsAreExactWhateverTheBatchSize) {
  const std::string data = ::testing::TempDir() + "/metrics.svm";
  {
    std::ofstream f(data);
    for (int e = 0; e < 1237; ++e) {
      f << (e % 3 == 0 || e % 7 == 0) << " " << e % 50 << ":1 " << (e * 7) % 100 << ":1\n";
    }
  }
  auto evaluate = [&](int batch_size) -> absl::StatusOr<std::map<std::string, float>> {
    TrainingJob job;
    if (!google::protobuf::TextFormat::ParseFromString(
            R"pb(name: "metrics"
                 model {
                   sequential {
                     layer { name: "bag" inputs: "ids" embedding_bag { input_dim: 100 output_dim: 4 combiner: SUM } }
                     layer { dense { units: 1 } }
                   }
                   loss { kind: SIGMOID_CROSS_ENTROPY }
                   metric: "accuracy" metric: "precision" metric: "recall" metric: "auc"
                 }
                 input { format: LIBSVM feature { name: "ids" kind: SPARSE } }
                 steps: 1 seed: 5)pb",
            &job)) {
      return absl::InternalError("bad job text");
    }
    job.mutable_input()->set_batch_size(batch_size);
    job.mutable_input()->mutable_train()->add_files(data);
    job.mutable_input()->mutable_test()->add_files(data);
    absl::StatusOr<CompiledModel> model = CompileModel(job);
    if (!model.ok()) return model.status();
    absl::StatusOr<JobPlan> plan = PlanJob(job, 1);
    if (!plan.ok()) return plan.status();
    std::map<std::string, Tensor> variables;
    for (const VariableDef& def : model->variables) {
      Tensor t = Tensor::Zeros(DT_FLOAT, *TensorShape::FromProto(def.shape()));
      for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = 0.5f * std::cos(1.3f * i);
      variables[def.name()] = t;
    }
    return MakeEvaluator(job, *plan, 1)(variables, RowReader());
  };
  auto batches = evaluate(8);  // the evaluator reads at least 500 a batch
  ASSERT_TRUE(batches.ok()) << batches.status();
  auto whole = evaluate(2000);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(batches->at("examples"), 1237);
  for (const char* m : {"accuracy", "precision", "recall", "auc"}) {
    EXPECT_FLOAT_EQ(batches->at(m), whole->at(m)) << m;
    EXPECT_GT(whole->at(m), 0.0f) << m;
    EXPECT_LT(whole->at(m), 1.0f) << m;
  }
  EXPECT_NEAR(batches->at("loss"), whole->at("loss"), 1e-6);
}

// AdamW and RMSprop (#25) pass the same check at parse, a bad field named.
TEST(JobPlannerTest, AdamWAndRmspropAreCheckedAtParse) {
  EXPECT_TRUE(Parse("optimizer { adamw { learning_rate: 0.001 } schedule { kind: COSINE } }").ok());
  EXPECT_TRUE(Parse("optimizer { rmsprop { learning_rate: 0.001 momentum: 0.9 centered: true } }").ok());
  auto job = Parse("optimizer { adamw { learning_rate: 0.001 weight_decay: -1 } }");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("job.pbtxt: optimizer.adamw.weight_decay must be >= 0"));
  job = Parse("optimizer { rmsprop { learning_rate: 0.001 rho: 1 } }");
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("job.pbtxt: optimizer.rmsprop.rho must be in [0, 1)"));
}

TEST(JobPlannerTest, GradientClippingIsCheckedAtParseNamingTheField) {
  for (const std::string ok : {"clipnorm: 1", "clipvalue: 0.5", "global_clipnorm: 1.0", "clipnorm: 0"}) {
    auto job = Parse(absl::StrCat("optimizer { adam { learning_rate: 0.001 } ", ok, " }"));
    EXPECT_TRUE(job.ok()) << ok << ": " << job.status();
  }
  const std::pair<std::string, std::string> bad[] = {
      {"clipnorm: -1", "job.pbtxt: optimizer.clipnorm: -1 is not a finite value >= 0"},
      {"clipvalue: nan", "job.pbtxt: optimizer.clipvalue: nan is not a finite value >= 0"},
      {"global_clipnorm: inf", "job.pbtxt: optimizer.global_clipnorm: inf is not a finite value >= 0"},
      {"clipnorm: 1 global_clipnorm: 2",
       "job.pbtxt: optimizer.global_clipnorm: set with optimizer.clipnorm; at most one clipping may be set"},
  };
  for (const auto& [clip, message] : bad) {
    auto job = Parse(absl::StrCat("optimizer { sgd { learning_rate: 0.1 } ", clip, " }"));
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << clip;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(message));
  }
}

TEST(JobPlannerTest, InputCompressionAndDecodeAreCheckedAtParse) {
  EXPECT_TRUE(Parse("", "compression: \"GZIP\"").ok());
  auto job = Parse("", "compression: \"SNAPPY\"");
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("job.pbtxt: input.compression: unknown compression \"SNAPPY\""));
  job = Parse("", "feature { name: \"ids\" kind: SPARSE decode: RAW_UINT8 }");
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("job.pbtxt: input.feature[1] (\"ids\").decode: RAW_UINT8 needs a DENSE feature"));
}

TEST(JobPlannerTest, AFeatureScaleOnTopOfInputScaleIsRefusedAtParse) {
  // Scaled twice, 1/255 * 1/255 trained a Fashion-MNIST model to 0.7639
  // instead of 0.8592.
  auto job = Parse("", "scale: 0.00392156862745098 feature { name: \"image\" shape: [28, 28, 1] "
                       "decode: ENCODED_IMAGE scale: 0.00392156862745098 }");
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("job.pbtxt: input.feature[1] (\"image\").scale (0.00392157) and input.scale (0.00392157) "
                        "would both scale this feature, one after the other: keep one -- the feature's scale for "
                        "this feature alone, or input.scale for every feature -- and remove the other"));
  EXPECT_TRUE(Parse("", "feature { name: \"image\" shape: [28, 28, 1] decode: ENCODED_IMAGE "
                        "scale: 0.00392156862745098 }").ok());
  EXPECT_TRUE(Parse("", "scale: 0.00392156862745098 feature { name: \"image\" shape: [28, 28, 1] "
                        "decode: RAW_UINT8 }").ok());
  EXPECT_TRUE(Parse("", "scale: 0.5 feature { name: \"image\" shape: [28, 28, 1] decode: RAW_UINT8 scale: 1 }").ok());
}

// A batch no worker would take (the chief used to retry Worker/Start many
// times a second for ever, showing RUNNING at step 0).
TEST(JobPlannerTest, ABatchTooLargeForEveryWorkerIsRefusedAtParse) {
  auto job = ParseJob(R"(
    model { sequential { layer { dense { units: 4 } } } loss { kind: MEAN_SQUARED_ERROR } }
    input { format: TFRECORD batch_size: 2147483647 train { files: "/nonexistent.tfrecord" }
            feature { name: "x" shape: 3 } } steps: 10)", "job.pbtxt");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("job.pbtxt: input.batch_size is 2147483647; at most 1048576 examples"));
}

// Bounds checked before the model is built, each naming its flag: the
// text's size, the layers, a raw graph's nodes.
TEST(JobPlannerTest, AJobPastItsBoundsIsRefusedNamingTheFlag) {
  const std::string input = R"(
    input { format: LIBSVM batch_size: 1 train { files: "/dev/null" } } steps: 10)";
  const std::string layers = R"(
    model { sequential { layer { dense { units: 4 } } layer { dense { units: 1 } } }
            loss { kind: MEAN_SQUARED_ERROR } })" + input;
  const std::string graph = R"(
    model { graph { node { name: "a" op: "Const" } node { name: "b" op: "Const" } node { name: "c" op: "Const" } }
            loss { kind: MEAN_SQUARED_ERROR } })" + input;
  JobLimits limits;
  limits.max_file_bytes = 100;
  EXPECT_THAT(std::string(ParseJob(layers, "job.pbtxt", limits).status().message()),
              HasSubstr(absl::StrCat("job.pbtxt: ", layers.size(),
                                     " bytes, more than the bound of 100 bytes for a job (--max_job_file_mb)")));
  limits = JobLimits();
  limits.max_layers = 1;
  EXPECT_THAT(std::string(ParseJob(layers, "job.pbtxt", limits).status().message()),
              HasSubstr("job.pbtxt: model.sequential has 2 layers, more than the bound of 1 (--max_model_layers)"));
  limits = JobLimits();
  limits.max_graph_nodes = 2;
  EXPECT_THAT(std::string(ParseJob(graph, "job.pbtxt", limits).status().message()),
              HasSubstr("job.pbtxt: model.graph has 3 nodes, more than the bound of 2 (--max_graph_nodes)"));
}

// A job whose worker would refuse its Start as larger than it receives
// (--max_receive_message_mb) is refused before it starts, saying so.
TEST(JobPlannerTest, AStartLargerThanAWorkerReceivesIsRefusedNamingTheFlag) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<JobPlan> plan = PlanJob(*job, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int64_t start = static_cast<int64_t>(AssignmentOf(*job, *plan).ByteSizeLong());
  EXPECT_TRUE(CheckWorkerMessageSizes(*job, *plan, 1, start + 100, 100).ok());
  absl::Status s = CheckWorkerMessageSizes(*job, *plan, 1, start + 99, 100);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("a worker's Start (the compute graph and placement) for this job is ", start,
                                     " bytes, more than the ", start + 99,
                                     " bytes a worker receives in one message (--max_receive_message_mb")));
}

// The stricter parse still takes every job users copy (their schedules and
// inputs included).
// A test split that cannot be read is found before training, not at the
// final evaluation (which once ended a whole job with no metric, exit 0).
TEST(JobPlannerTest, ATestSplitThatCannotBeReadIsRefusedBeforeTraining) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(CheckTestSplit(*job).ok()) << CheckTestSplit(*job);

  TrainingJob missing = *job;
  missing.mutable_input()->mutable_test()->set_files(0, "/nonexistent/t10k-images-idx3-ubyte.gz");
  absl::Status s = CheckTestSplit(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("input.test: the test split cannot be read, so the job would end with no final metric: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent/t10k-images-idx3-ubyte.gz"));

  // A file that opens but holds no IDX data.
  const std::string garbage = ::testing::TempDir() + "/garbage-images.gz";
  std::ofstream(garbage) << "not an idx file";
  TrainingJob bad = *job;
  bad.mutable_input()->mutable_test()->set_files(0, garbage);
  EXPECT_THAT(std::string(CheckTestSplit(bad).message()), HasSubstr("input.test: the test split cannot be read"));

  TrainingJob none = *job;
  none.mutable_input()->clear_test();
  EXPECT_TRUE(CheckTestSplit(none).ok());
}

TEST(JobPlannerTest, EveryExampleJobParses) {
  for (const char* name : {"fashion_mnist_cnn", "fashion_mnist_mlp", "fashion_mnist_mlp_central_storage",
                           "fashion_mnist_mlp_devices", "fashion_mnist_mlp_mirrored", "sparse_libsvm",
                           "sparse_libsvm_hybrid", "fashion_mnist_onnx_mlp", "fashion_mnist_onnx_cnn",
                           "fashion_mnist_onnx_resnet", "fashion_mnist_onnx_resnet_bn", "fashion_mnist_onnx_vit",
                           "fashion_mnist_onnx_vit_mirrored", "fashion_mnist_onnx_mobilenetv2",
                           "fashion_mnist_onnx_keras_cnn", "fashion_mnist_mlp_png"}) {
    absl::StatusOr<TrainingJob> job = LoadJob(absl::StrCat("examples/", name, ".pbtxt"));
    EXPECT_TRUE(job.ok()) << job.status();
  }
}

// The ONNX examples plan as the chief plans them: their models found beside
// the job, imported, differentiated and placed on 2 PS. A model with
// BatchNormalization has two moving-average variables per node besides
// (resnet_bn 9 nodes, mobilenetv2 22), each with its batch statistic.
TEST(JobPlannerTest, OnnxExampleJobsPlan) {
  const std::map<std::string, size_t> variables = {
      {"fashion_mnist_onnx_mlp", 6}, {"fashion_mnist_onnx_cnn", 8}, {"fashion_mnist_onnx_resnet", 20},
      {"fashion_mnist_onnx_resnet_bn", 29 + 18}, {"fashion_mnist_onnx_vit", 32},
      {"fashion_mnist_onnx_mobilenetv2", 68 + 44}, {"fashion_mnist_onnx_keras_cnn", 8}};
  for (const auto& [name, count] : variables) {
    absl::StatusOr<TrainingJob> job = LoadJob(absl::StrCat("examples/", name, ".pbtxt"));
    ASSERT_TRUE(job.ok()) << job.status();
    absl::StatusOr<JobPlan> plan = PlanJob(*job, 2);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
    EXPECT_EQ(plan->gradient_node.size(), count) << name;
  }
}

// model.onnx.path relative to the job file is found beside it; an
// absolute one is kept.
TEST(JobPlannerTest, AnOnnxPathIsTakenFromTheJobFilesDirectory) {
  const std::string dir = ::testing::TempDir();
  for (const std::string& model : {std::string("models/m.onnx"), std::string("/abs/m.onnx")}) {
    {
      std::ofstream out(dir + "/onnx_job.pbtxt");
      out << "model { onnx { path: \"" << model << "\" } }\n"
          << "input { format: TFRECORD batch_size: 8 train { files: \"/x.tfrecord\" } feature { name: \"x\" shape: 3 } }\n";
    }
    absl::StatusOr<TrainingJob> job = LoadJob(dir + "/onnx_job.pbtxt");
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->model().onnx().path(), model[0] == '/' ? model : dir + "/" + model);
  }
}

}  // namespace
}  // namespace psrt
