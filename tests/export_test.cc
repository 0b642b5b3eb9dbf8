// //chief:export against the real readers: a cluster of real processes
// trains the Fashion-MNIST MLP and CNN briefly, the exporter turns the
// committed checkpoint into a TensorFlow checkpoint, an ONNX model, a
// Keras .weights.h5 and a .keras file, and TensorFlow 2.21 / Keras 3 /
// ONNX Runtime (the test-only venv-tf) read them: every variable
// bit-identical, Keras models of the same layer list (Sequential and
// Functional) restored by load_weights and load_model, ONNX Runtime's
// predictions equal to Keras' within float tolerance and the accuracies
// equal to psrt's evaluation of the weights.
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "chief/export_formats/keras_checkpoint.h"
#include "common/plan/job_planner.h"
#include "common/testing/python_tool.h"
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
  void Train(const std::string& example, int64_t steps, int ps = 1) {
    Setup(ps, 1, ConsistencyDef::ASYNC, steps);
    auto job = LoadJob(testing::RunfilePath(example));
    ASSERT_TRUE(job.ok()) << job.status();
    *job_.mutable_model() = job->model();
    *job_.mutable_optimizer() = job->optimizer();
    job_.set_name(job->name());
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
    ASSERT_EQ(Export({"--format=tf", "--out=" + dir_ + "/tf/model", "--evaluate"}, "psrt evaluation:", &evaluation),
              0);
    ASSERT_EQ(Export({"--format=onnx", "--out=" + dir_ + "/model.onnx"}), 0);
    std::smatch acc, examples;
    ASSERT_TRUE(std::regex_search(evaluation, acc, std::regex("accuracy=([0-9.]+)"))) << evaluation;
    ASSERT_TRUE(std::regex_search(evaluation, examples, std::regex("examples=([0-9.]+)"))) << evaluation;
    EXPECT_GT(std::stod(acc[1]), 0.5) << evaluation;  // trained: chance is 0.1
    WriteRawVariables(dir_ + "/raw");
    Check("tests/tools/check_export.py",
          {"--tf_prefix=" + dir_ + "/tf/model", "--onnx=" + dir_ + "/model.onnx", "--raw_dir=" + dir_ + "/raw"},
          acc[1], examples[1]);
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
    flags.insert(flags.end(), {"--images=" + job_.input().test().files(0), "--labels=" + job_.input().test().labels_file(),
                               absl::StrFormat("--scale=%.9g", job_.input().scale()),
                               absl::StrCat("--examples=", static_cast<int>(std::stod(examples))),
                               "--psrt_accuracy=" + accuracy});
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
  refused("units", [](SequentialModel* m) { m->mutable_layer(3)->mutable_dense()->set_units(64); }, "variable dense_3/");
  // One more layer: the checkpoint has none of its variables.
  refused("extra layer", [](SequentialModel* m) { m->add_layer()->mutable_dense()->set_units(10); },
          "the checkpoint has no variable dense_6/");
  // The last layer under another name: the checkpoint's variables are not the job's.
  refused("renamed", [](SequentialModel* m) { m->mutable_layer(5)->set_name("logits"); }, "variable dense_5/");
  // The checkpoint records its job: each refusal says the job does not
  // match, even where every variable fits (another activation).
  refused("activation", [](SequentialModel* m) { m->mutable_layer(1)->mutable_dense()->set_activation(TANH); },
          "does not match this checkpoint");
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
