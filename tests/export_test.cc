// //chief:export against the real readers: a cluster of real processes
// trains the Fashion-MNIST MLP and CNN briefly, the exporter turns the
// committed checkpoint into a TensorFlow checkpoint, an ONNX model, a
// Keras .weights.h5 and a .keras file, and TensorFlow 2.21 / Keras 3 /
// ONNX Runtime (the test-only venv-tf) read them: every variable
// bit-identical, Keras models of the same layer list (Sequential and
// Functional) restored by load_weights and load_model, ONNX Runtime's
// predictions equal to Keras' within float tolerance and the accuracies
// equal to psrt's evaluation of the weights.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "chief/export_formats/keras_checkpoint.h"
#include "common/checkpoint/checkpoint_slots.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "common/optimizer.h"
#include "common/plan/job_planner.h"
#include "common/testing/python_tool.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;

class ExportTest : public testing::TrainingClusterTest {
 protected:
  // Trains `example`'s model (its layers and optimizer on the harness's
  // MLP job) for `steps` on `ps` PS and one worker; the chief commits a
  // checkpoint at step 200 and at the end.
  // `change`, when given, edits the job before it is written.
  void Train(const std::string& example, int64_t steps, int ps = 1,
             const std::function<void(TrainingJob*)>& change = nullptr) {
    Setup(ps, 1, ConsistencyDef::ASYNC, steps);
    auto job = LoadJob(testing::RunfilePath(example));
    ASSERT_TRUE(job.ok()) << job.status();
    *job_.mutable_model() = job->model();
    *job_.mutable_optimizer() = job->optimizer();
    job_.set_name(job->name());
    if (change) change(&job_);
    job_.mutable_eval()->set_max_examples(0);  // the whole test split, for the accuracy comparison
    WriteJob();
    example_ = testing::RunfilePath(example);
    std::vector<std::unique_ptr<Daemon>> servers;
    for (int i = 0; i < ps; ++i) servers.push_back(StartPs(i));
    auto worker = StartWorker(0);
    auto chief = StartChief();
    ASSERT_EQ(ExitCode(chief.get()), 0);
    ASSERT_EQ(ExitCode(worker.get()), 0);
  }

  // Runs //chief:export with `flags`; its exit code, and its output lines
  // matching `pattern` into *match.
  int Export(const std::vector<std::string>& flags, const std::string& pattern = "", std::string* match = nullptr) {
    std::vector<std::string> argv = {testing::RunfilePath("chief/export"), "--job=" + job_path_,
                                     "--checkpoint_dir=" + dir_ + "/ckpt"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto d = Daemon::Start("export", argv);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return -1;
    int code = ExitCode(d->get());
    if (match != nullptr) *match = (*d)->WaitForMatch(pattern, absl::Seconds(10));
    return code;
  }

  // psrt's values of the checkpoint's variables, one raw file each, and
  // variables.txt (key, variable, file, shape) for check_export.py.
  void WriteRawVariables(const std::string& raw_dir) {
    std::filesystem::create_directories(raw_dir);
    auto ckpt = ReadCheckpointVariables(dir_ + "/ckpt", -1, job_);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto layers = KerasLayers(job_);
    ASSERT_TRUE(layers.ok()) << layers.status();
    std::ofstream list(raw_dir + "/variables.txt");
    int n = 0;
    for (size_t i = 0; i < layers->size(); ++i) {
      for (const auto& [attribute, variable] : (*layers)[i].variables) {
        const Tensor& t = ckpt->values.at(variable);
        const std::string file = absl::StrCat("v", n++, ".bin");
        std::ofstream(raw_dir + "/" + file, std::ios::binary)
            .write(static_cast<const char*>(t.raw_data()), t.TotalBytes());
        list << KerasCheckpointKey(static_cast<int>(i), attribute) << "\t" << variable << "\t" << file << "\t"
             << absl::StrJoin(t.shape().dims(), ",") << "\n";
      }
    }
    EXPECT_EQ(n, static_cast<int>(ckpt->values.size()));
  }

  void ExportAndCheck() {
    std::string evaluation;
    std::filesystem::create_directories(dir_ + "/tf");
    ASSERT_EQ(Export({"--format=tf", "--out=" + dir_ + "/tf/model", "--evaluate"}, "psrt evaluation:", &evaluation), 0);
    ASSERT_EQ(Export({"--format=onnx", "--out=" + dir_ + "/model.onnx"}), 0);
    std::smatch acc, examples;
    ASSERT_TRUE(std::regex_search(evaluation, acc, std::regex("accuracy=([0-9.]+)"))) << evaluation;
    ASSERT_TRUE(std::regex_search(evaluation, examples, std::regex("examples=([0-9.]+)"))) << evaluation;
    EXPECT_GT(std::stod(acc[1]), 0.5) << evaluation;  // trained: chance is 0.1
    WriteRawVariables(dir_ + "/raw");
    Check("tests/tools/check_export.py",
          {"--tf_prefix=" + dir_ + "/tf/model", "--onnx=" + dir_ + "/model.onnx", "--raw_dir=" + dir_ + "/raw"}, acc[1],
          examples[1]);
    // Keras 3's own formats, read by Keras' own loaders.
    ASSERT_EQ(Export({"--format=weights_h5", "--out=" + dir_ + "/model.weights.h5"}), 0);
    ASSERT_EQ(Export({"--format=keras", "--out=" + dir_ + "/model.keras"}), 0);
    auto shape = KerasInputShape(job_);
    ASSERT_TRUE(shape.ok()) << shape.status();
    Check("tests/tools/check_keras_saving.py",
          {"--job=" + example_, "--input_shape=" + absl::StrJoin(*shape, ","),
           "--weights_h5=" + dir_ + "/model.weights.h5", "--keras=" + dir_ + "/model.keras",
           "--raw_dir=" + dir_ + "/raw"},
          acc[1], examples[1]);
  }

  // Runs a checker of tests/tools with `flags` and the test split's
  // (images, labels, scale, examples, psrt's accuracy); it must end "OK".
  void Check(const std::string& tool, std::vector<std::string> flags, const std::string& accuracy,
             const std::string& examples) {
    const std::string report = dir_ + "/check.txt";
    flags.insert(flags.end(),
                 {"--images=" + job_.input().test().files(0), "--labels=" + job_.input().test().labels_file(),
                  absl::StrFormat("--scale=%.9g", job_.input().scale()),
                  absl::StrCat("--examples=", static_cast<int>(std::stod(examples))), "--psrt_accuracy=" + accuracy});
    absl::Status s = testing::RunPythonTool(tool, flags, report, testing::kVenvTfPython);
    std::ifstream in(report);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(s.ok()) << s << "\n" << text;
    EXPECT_NE(text.find("\nOK"), std::string::npos) << text;
    std::cout << text;
  }

  std::string example_;  // the example job file Train() took the model from
};

// Two PS: each variable is assembled from the store that holds it.
TEST_F(ExportTest, MlpReadsTheSameInTensorFlowKerasAndOnnxRuntime) {
  Train("examples/fashion_mnist_mlp.pbtxt", 300, /*ps=*/2);
  ExportAndCheck();
}

TEST_F(ExportTest, CnnReadsTheSameInTensorFlowKerasAndOnnxRuntime) {
  Train("examples/fashion_mnist_cnn.pbtxt", 300);
  ExportAndCheck();
}

// A model imported from ONNX (PyTorch's vision transformer) goes back out
// as its own file with the trained values, and ONNX Runtime scores it as
// psrt does.
TEST_F(ExportTest, AnImportedModelComesBackAsTheFileItCameIn) {
  Train("examples/fashion_mnist_onnx_vit.pbtxt", 300);
  std::string evaluation;
  ASSERT_EQ(Export({"--format=onnx", "--out=" + dir_ + "/vit.onnx", "--evaluate"}, "psrt evaluation:", &evaluation), 0);
  std::smatch acc, examples;
  ASSERT_TRUE(std::regex_search(evaluation, acc, std::regex("accuracy=([0-9.]+)"))) << evaluation;
  ASSERT_TRUE(std::regex_search(evaluation, examples, std::regex("examples=([0-9.]+)"))) << evaluation;
  EXPECT_GT(std::stod(acc[1]), 0.5) << evaluation;
  Check("tests/tools/check_onnx_reexport.py",
        {"--original=" + job_.model().onnx().path(), "--exported=" + dir_ + "/vit.onnx"}, acc[1], examples[1]);
}

TEST_F(ExportTest, BadRequestsFailNamingWhatIsWrong) {
  Train("examples/fashion_mnist_mlp.pbtxt", 200);
  std::string line;
  EXPECT_EQ(Export({"--format=tf", "--out=" + dir_ + "/m", "--step=7"}, "error:", &line), 1);
  EXPECT_NE(line.find("no committed checkpoint at step 7"), std::string::npos) << line;
  EXPECT_NE(line.find("200)"), std::string::npos) << line;  // the steps it has
  EXPECT_EQ(Export({"--format=pb", "--out=" + dir_ + "/m"}, "error:", &line), 1);
  EXPECT_NE(line.find("--format must be weights_h5, keras, tf or onnx"), std::string::npos) << line;
  std::vector<std::string> argv = {testing::RunfilePath("chief/export"), "--job=" + job_path_,
                                   "--checkpoint_dir=" + dir_ + "/nowhere", "--format=onnx", "--out=" + dir_ + "/m"};
  auto d = Daemon::Start("export", argv);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(ExitCode(d->get()), 1);
  EXPECT_NE((*d)->WaitForMatch("no checkpoint directory .*/nowhere", absl::Seconds(10)), "");
}

// A job whose model is not the checkpoint's is refused naming the variable
// that differs, whichever way it differs; no file is written.
TEST_F(ExportTest, AJobThatDoesNotFitTheCheckpointIsRefusedNamingTheVariable) {
  Train("examples/fashion_mnist_mlp.pbtxt", 200);
  const TrainingJob trained = job_;
  auto refused = [&](const std::string& what, const std::function<void(SequentialModel*)>& change,
                     const std::string& variable) {
    job_ = trained;
    change(job_.mutable_model()->mutable_sequential());
    WriteJob();
    for (const char* format : {"weights_h5", "keras"}) {
      const std::string out = absl::StrCat(dir_, "/", format, ".out");
      std::string line;
      EXPECT_EQ(Export({absl::StrCat("--format=", format), "--out=" + out}, "error:", &line), 1) << what;
      EXPECT_NE(line.find(variable), std::string::npos) << what << ": " << line;
      EXPECT_FALSE(std::filesystem::exists(out)) << what;
    }
  };
  // A layer of other units: its kernel and bias have other shapes.
  refused(
      "units", [](SequentialModel* m) { m->mutable_layer(3)->mutable_dense()->set_units(64); }, "variable dense_3/");
  // One more layer: the checkpoint has none of its variables.
  refused(
      "extra layer", [](SequentialModel* m) { m->add_layer()->mutable_dense()->set_units(10); },
      "the checkpoint has no variable dense_6/");
  // The last layer under another name: the checkpoint's variables are not the job's.
  refused(
      "renamed", [](SequentialModel* m) { m->mutable_layer(5)->set_name("logits"); }, "variable dense_5/");
  // The checkpoint records its job: each refusal says the job does not
  // match, even where every variable fits (another activation).
  refused(
      "activation", [](SequentialModel* m) { m->mutable_layer(1)->mutable_dense()->set_activation(TANH); },
      "does not match this checkpoint");
}

// The MLP without dropout (a Keras step is then deterministic) trained by
// `optimizer` with no schedule, for the optimizer export.
void OptimizerJob(const std::string& optimizer_text, TrainingJob* job) {
  SequentialModel* m = job->mutable_model()->mutable_sequential();
  for (int i = m->layer_size() - 1; i >= 0; --i) {
    if (m->layer(i).has_dropout()) m->mutable_layer()->DeleteSubrange(i, 1);
  }
  job->clear_optimizer();
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(optimizer_text, job->mutable_optimizer()));
}

// psrt's state of the checkpoint's optimizer for check_keras_optimizer.py:
// optimizer.txt (its kind and hyper-parameters as psrt applies them, the
// step, the update count) and variables.txt (variable, value file, shape,
// slot files), in Keras' weight order.
void WriteRawSlots(const std::string& ckpt_dir, const TrainingJob& job, const std::string& raw_dir) {
  std::filesystem::create_directories(raw_dir);
  auto latest = ReadCheckpointVariables(ckpt_dir, -1, job);
  ASSERT_TRUE(latest.ok()) << latest.status();
  auto ckpt = ReadCheckpointSlots(ckpt_dir, latest->step, job);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto layers = KerasLayers(job);
  ASSERT_TRUE(layers.ok()) << layers.status();
  auto write = [&raw_dir](const std::string& file, const Tensor& t) {
    std::ofstream(raw_dir + "/" + file, std::ios::binary).write(static_cast<const char*>(t.raw_data()), t.TotalBytes());
  };
  std::ofstream list(raw_dir + "/variables.txt");
  int n = 0;
  int64_t updates = -1;
  for (const KerasLayer& layer : *layers) {
    for (const auto& [attribute, variable] : layer.variables) {
      const VariableState& s = ckpt->states.at(variable);
      updates = s.updates;
      const std::string file = absl::StrCat("v", n, ".bin");
      write(file, s.value);
      std::vector<std::string> slots;
      for (size_t k = 0; k < s.slots.size(); ++k) {
        slots.push_back(absl::StrCat("v", n, "_slot", k, ".bin"));
        write(slots.back(), s.slots[k]);
      }
      ++n;
      list << variable << "\t" << file << "\t" << absl::StrJoin(s.value.shape().dims(), ",") << "\t"
           << absl::StrJoin(slots, ",") << "\n";
    }
  }
  const OptimizerDef& o = job.optimizer();
  auto Or = [](float v, float fallback) { return v == 0 ? fallback : v; };
  std::ofstream hp(raw_dir + "/optimizer.txt");
  hp << "step " << ckpt->step << "\nupdates " << updates << "\n";
  switch (o.kind_case()) {
    case OptimizerDef::kSgd:
      hp << "kind sgd\nlearning_rate " << absl::StrFormat("%.9g", o.sgd().learning_rate()) << "\n";
      break;
    case OptimizerDef::kMomentum:
      hp << "kind momentum\nlearning_rate " << absl::StrFormat("%.9g", o.momentum().learning_rate()) << "\nmomentum "
         << absl::StrFormat("%.9g", o.momentum().momentum()) << "\nnesterov " << (o.momentum().nesterov() ? 1 : 0)
         << "\n";
      break;
    case OptimizerDef::kAdam:
      hp << "kind adam\nlearning_rate " << absl::StrFormat("%.9g", o.adam().learning_rate()) << "\nbeta1 "
         << absl::StrFormat("%.9g", Or(o.adam().beta1(), 0.9f)) << "\nbeta2 "
         << absl::StrFormat("%.9g", Or(o.adam().beta2(), 0.999f)) << "\nepsilon "
         << absl::StrFormat("%.9g", Or(o.adam().epsilon(), 1e-7f)) << "\n";
      break;
    case OptimizerDef::kAdamw:
      hp << "kind adamw\nlearning_rate " << absl::StrFormat("%.9g", o.adamw().learning_rate()) << "\nbeta1 "
         << absl::StrFormat("%.9g", Or(o.adamw().beta1(), 0.9f)) << "\nbeta2 "
         << absl::StrFormat("%.9g", Or(o.adamw().beta2(), 0.999f)) << "\nepsilon "
         << absl::StrFormat("%.9g", Or(o.adamw().epsilon(), 1e-7f)) << "\nweight_decay "
         << absl::StrFormat("%.9g", o.adamw().has_weight_decay() ? o.adamw().weight_decay() : 0.004f) << "\n";
      break;
    case OptimizerDef::kRmsprop:
      hp << "kind rmsprop\nlearning_rate " << absl::StrFormat("%.9g", o.rmsprop().learning_rate()) << "\nrho "
         << absl::StrFormat("%.9g", Or(o.rmsprop().rho(), 0.9f)) << "\nmomentum "
         << absl::StrFormat("%.9g", o.rmsprop().momentum()) << "\nepsilon "
         << absl::StrFormat("%.9g", Or(o.rmsprop().epsilon(), 1e-7f)) << "\ncentered "
         << (o.rmsprop().centered() ? 1 : 0) << "\n";
      break;
    default:
      FAIL() << "no raw form for this optimizer";
  }
}

// --include_optimizer: Keras' load_model gets the optimizer psrt trained
// with, in psrt's state, and one more Keras step is psrt's next step.
// (Not TEST_P: the harness names its files after the test, and a
// parameterized test's name has a '/'.)
class ExportOptimizerTest : public ExportTest {
 protected:
  void TrainExportAndCheck(const std::string& optimizer) {
    Train("examples/fashion_mnist_mlp.pbtxt", 250, /*ps=*/2,
          [&optimizer](TrainingJob* job) { OptimizerJob(optimizer, job); });
    ASSERT_EQ(Export({"--format=keras", "--include_optimizer", "--out=" + dir_ + "/opt.keras"}), 0);
    ASSERT_EQ(Export({"--format=keras", "--out=" + dir_ + "/plain.keras"}), 0);
    WriteRawSlots(dir_ + "/ckpt", job_, dir_ + "/raw");
    auto shape = KerasInputShape(job_);
    ASSERT_TRUE(shape.ok()) << shape.status();
    const std::string report = dir_ + "/check.txt";
    absl::Status s = testing::RunPythonTool(
        "tests/tools/check_keras_optimizer.py",
        {"--keras=" + dir_ + "/opt.keras", "--plain=" + dir_ + "/plain.keras", "--raw_dir=" + dir_ + "/raw",
         "--images=" + job_.input().test().files(0), "--labels=" + job_.input().test().labels_file(),
         absl::StrFormat("--scale=%.9g", job_.input().scale()), "--input_shape=" + absl::StrJoin(*shape, ",")},
        report, testing::kVenvTfPython);
    std::ifstream in(report);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(s.ok()) << s << "\n" << text;
    EXPECT_NE(text.find("\nOK"), std::string::npos) << text;
    std::cout << text;
    ExpectPsrtsNextStepIsKeras(dir_ + "/raw");
  }

  // psrt's own Optimizer (common/optimizer.cc), applied to the checkpoint's
  // weights and slots with the gradients Keras computed on the checker's
  // batch, gives the weights Keras' train_on_batch gave (keras_after<i>).
  void ExpectPsrtsNextStepIsKeras(const std::string& raw_dir) {
    auto latest = ReadCheckpointVariables(dir_ + "/ckpt", -1, job_);
    ASSERT_TRUE(latest.ok()) << latest.status();
    auto ckpt = ReadCheckpointSlots(dir_ + "/ckpt", latest->step, job_);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto optimizer = Optimizer::Create(job_.optimizer());
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    auto layers = KerasLayers(job_);
    ASSERT_TRUE(layers.ok()) << layers.status();
    auto read = [&raw_dir](const std::string& file, int64_t n) {
      std::vector<float> v(static_cast<size_t>(n));
      std::ifstream in(raw_dir + "/" + file, std::ios::binary);
      in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
      EXPECT_TRUE(in.good()) << file;
      return v;
    };
    int i = 0;
    float worst = 0;
    for (const KerasLayer& layer : *layers) {
      for (const auto& [attribute, variable] : layer.variables) {
        const VariableState& s = ckpt->states.at(variable);
        const int64_t n = s.value.NumElements();
        std::vector<float> w(s.value.data<float>(), s.value.data<float>() + n);
        std::vector<std::vector<float>> slots;
        for (const Tensor& t : s.slots) slots.emplace_back(t.data<float>(), t.data<float>() + n);
        std::vector<float*> slot_ptrs;
        for (auto& slot : slots) slot_ptrs.push_back(slot.data());
        const std::vector<float> grad = read(absl::StrCat("grad", i, ".bin"), n);
        const std::vector<float> keras = read(absl::StrCat("keras_after", i, ".bin"), n);
        (*optimizer)->Apply(w.data(), grad.data(), n, slot_ptrs.data(), s.updates + 1);
        for (int64_t k = 0; k < n; ++k) worst = std::max(worst, std::abs(w[k] - keras[k]));
        ++i;
      }
    }
    EXPECT_LE(worst, 1e-6f) << "psrt's next step differs from Keras' train_on_batch";
    std::cout << "psrt's Optimizer on Keras' gradients vs Keras' train_on_batch: " << i << " variables, max difference "
              << worst << "\n";
  }
};

TEST_F(ExportOptimizerTest, AdamResumesInKeras) { TrainExportAndCheck("adam { learning_rate: 0.001 }"); }

TEST_F(ExportOptimizerTest, MomentumResumesInKeras) {
  TrainExportAndCheck("momentum { learning_rate: 0.01 momentum: 0.9 }");
}

TEST_F(ExportOptimizerTest, NesterovResumesInKeras) {
  TrainExportAndCheck("momentum { learning_rate: 0.01 momentum: 0.9 nesterov: true }");
}

TEST_F(ExportOptimizerTest, CenteredRmspropWithMomentumResumesInKeras) {
  TrainExportAndCheck("rmsprop { learning_rate: 0.001 momentum: 0.5 centered: true }");
}

TEST_F(ExportOptimizerTest, AdamWResumesInKeras) {
  TrainExportAndCheck("adamw { learning_rate: 0.001 weight_decay: 0.01 }");
}

TEST_F(ExportOptimizerTest, SgdResumesInKeras) { TrainExportAndCheck("sgd { learning_rate: 0.01 }"); }

// An optimizer Keras cannot carry on exactly is refused, saying which and
// why, and nothing is written.
TEST_F(ExportTest, AnOptimizerKerasCannotResumeIsRefused) {
  Train("examples/fashion_mnist_mlp.pbtxt", 200);  // adam with a cosine schedule
  std::string line;
  const std::string out = dir_ + "/refused.keras";
  EXPECT_EQ(Export({"--format=keras", "--include_optimizer", "--out=" + out}, "error:", &line), 1);
  EXPECT_NE(line.find("cannot export the optimizer adam with a learning-rate schedule"), std::string::npos) << line;
  EXPECT_EQ(Export({"--format=weights_h5", "--include_optimizer", "--out=" + out}, "error:", &line), 1);
  EXPECT_NE(line.find("--include_optimizer is for --format=keras only"), std::string::npos) << line;
  job_.clear_optimizer();
  job_.mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.01f);
  WriteJob();
  EXPECT_EQ(Export({"--format=keras", "--include_optimizer", "--out=" + out}, "error:", &line), 1);
  EXPECT_NE(line.find("cannot export the optimizer adagrad: psrt's update is lr*g/(sqrt(accumulator)+1e-7)"),
            std::string::npos)
      << line;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// The checkpoint records its job: no --job needed.
TEST_F(ExportTest, TheCheckpointAloneIsEnoughToExport) {
  Train("examples/fashion_mnist_mlp.pbtxt", 200);
  const std::string out = dir_ + "/alone.weights.h5";
  std::vector<std::string> argv = {testing::RunfilePath("chief/export"), "--checkpoint_dir=" + dir_ + "/ckpt",
                                   "--format=weights_h5", "--out=" + out};
  auto d = Daemon::Start("export", argv);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(ExitCode(d->get()), 0);
  EXPECT_TRUE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace psrt
