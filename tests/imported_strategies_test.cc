// An imported model (examples/onnx/mlp.onnx, exported by PyTorch's
// torch.onnx.export) under both kinds of strategy, through the launcher a
// user runs: multi_worker_mirrored with 2 workers and worker:1 SIGKILLed
// mid-run, then the PS strategy (2 PS, 2 workers) restoring that run's
// checkpoint, taken with the other layout (a replica per worker), and
// training on from its step. Issue #24: a user's model goes through every
// strategy and its failures, not only the native layer list.
//
//   bazel test //tests:imported_strategies_test --test_output=streamed
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "common/plan/job_planner.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

// The imported MLP example cut to `steps` steps under `strategy`, its model
// path made absolute by LoadJob (or `model`, a file of examples/onnx/),
// written beside `run_dir`.
std::string WriteOnnxMlpJob(const std::string& run_dir, const std::string& name, int64_t steps, bool mirrored,
                            const std::string& model = "") {
  auto job = LoadJob(testing::RunfilePath("examples/fashion_mnist_onnx_mlp.pbtxt"));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return "";
  if (!model.empty()) job->mutable_model()->mutable_onnx()->set_path(testing::RunfilePath("examples/onnx/" + model));
  job->set_epochs(0);
  job->set_steps(steps);
  job->mutable_checkpoint()->set_every_steps(200);
  job->mutable_eval()->set_every_steps(0);
  job->mutable_eval()->set_max_examples(2000);
  job->clear_summary_path();
  job->clear_log_dir();
  if (mirrored) {
    job->mutable_strategy()->mutable_multi_worker_mirrored();
    job->mutable_consistency()->set_mode(ConsistencyDef::SYNC);  // what all-reduce is
  } else {
    job->mutable_strategy()->mutable_parameter_server();
  }
  return testing::WriteJobFile(*job, absl::StrCat(run_dir, "-", name, ".pbtxt"));
}

std::string Field(const std::string& summary, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex("\"" + name + "\": ([0-9.]+)"))) return "";
  return m[1];
}

std::string RunLauncher(const std::string& run_dir, std::vector<std::string> args,
                        const std::vector<std::string>& expect_lines) {
  std::vector<std::string> argv = {testing::RunfilePath("deploy/local_cluster"), "--run_dir=" + run_dir};
  argv.insert(argv.end(), args.begin(), args.end());
  auto launcher = testing::Daemon::Start("launcher", argv);
  EXPECT_TRUE(launcher.ok()) << launcher.status();
  if (!launcher.ok()) return "";
  auto status = (*launcher)->Wait(absl::Minutes(8));
  EXPECT_TRUE(status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << (status.ok() ? DescribeWaitStatus(*status) : status.status().ToString());
  for (const std::string& line : expect_lines) {
    EXPECT_TRUE((*launcher)->WaitForLine(line, absl::Seconds(1))) << "the launcher never said: " << line;
  }
  std::ifstream in(run_dir + "/summary.json");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ImportedStrategiesTest, MirroredWithAWorkerKilledThenThePsStrategyFromItsCheckpoint) {
  const std::string run_dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/imported");
  const std::string mirrored = WriteOnnxMlpJob(run_dir, "mirrored", 800, /*mirrored=*/true);
  const std::string ps = WriteOnnxMlpJob(run_dir, "ps", 1200, /*mirrored=*/false);
  ASSERT_FALSE(mirrored.empty());
  ASSERT_FALSE(ps.empty());

  // 1. All-reduce, 2 workers (no PS), worker:1 killed at step 300.
  const std::string first = RunLauncher(run_dir, {"--job=" + mirrored, "--workers=2", "--kill=worker:1@300"},
                                        {"killed worker:1 with SIGKILL"});
  ASSERT_FALSE(first.empty()) << "no summary";
  EXPECT_EQ(Field(first, "failures_survived"), "1") << first;
  EXPECT_EQ(Field(first, "total_steps"), "800") << first;
  const std::string first_accuracy = Field(first, "accuracy");
  ASSERT_FALSE(first_accuracy.empty()) << first;
  EXPECT_GT(std::stod(first_accuracy), 0.75) << first;

  // 2. The PS strategy in the same run directory: the mirrored run's last
  // checkpoint (step 800, one store per worker) is assembled onto 2 PS.
  const std::string second = RunLauncher(run_dir, {"--job=" + ps, "--ps=2", "--workers=2"},
                                         {"taken with another layout", "assembling every store's variables"});
  ASSERT_FALSE(second.empty()) << "no summary";
  EXPECT_EQ(Field(second, "restored_from_step"), "800") << second;
  EXPECT_EQ(Field(second, "total_steps"), "1200") << second;
  const std::string second_accuracy = Field(second, "accuracy");
  ASSERT_FALSE(second_accuracy.empty()) << second;
  // Trained on from the restored weights, not from fresh ones.
  EXPECT_GT(std::stod(second_accuracy), 0.75) << second;
  EXPECT_EQ(testing::ProcessesNaming(run_dir + "/cluster.json").size(), 0u);
}

// Batch normalisation (examples/onnx/cnn_bn.onnx: BatchNormalization in
// training mode after each convolution) under all-reduce: each replica's
// moving statistics are updated from the all-reduced mean of the replicas'
// batch statistics, so the one copy the checkpoint keeps is every
// replica's; evaluation normalises with them. Then the PS strategy restores
// them (moving-average variables on the PS) and trains on.
TEST(ImportedStrategiesTest, BatchNormUnderAllReduceThenThePsStrategy) {
  const std::string run_dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/imported_bn");
  const std::string mirrored = WriteOnnxMlpJob(run_dir, "mirrored", 400, /*mirrored=*/true, "cnn_bn.onnx");
  const std::string ps = WriteOnnxMlpJob(run_dir, "ps", 600, /*mirrored=*/false, "cnn_bn.onnx");
  ASSERT_FALSE(mirrored.empty());
  ASSERT_FALSE(ps.empty());

  const std::string first = RunLauncher(run_dir, {"--job=" + mirrored, "--workers=2"}, {"final test accuracy"});
  ASSERT_FALSE(first.empty()) << "no summary";
  const std::string first_accuracy = Field(first, "accuracy");
  ASSERT_FALSE(first_accuracy.empty()) << first;
  EXPECT_GT(std::stod(first_accuracy), 0.75) << first;

  // The moving statistics moved from their initial 0 and 1 (PyTorch's
  // running_mean and running_var), and every variance stays positive.
  auto job = LoadJob(mirrored);
  ASSERT_TRUE(job.ok()) << job.status();
  auto ckpt = ReadCheckpointVariables(run_dir + "/checkpoints", -1, *job);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->step, 400);
  for (const char* layer : {"1", "5"}) {
    const Tensor& mean = ckpt->values.at(absl::StrCat(layer, ".running_mean"));
    const Tensor& var = ckpt->values.at(absl::StrCat(layer, ".running_var"));
    float moved = 0;
    for (int64_t i = 0; i < mean.NumElements(); ++i) {
      moved = std::max({moved, std::abs(mean.span<float>()[i]), std::abs(var.span<float>()[i] - 1.0f)});
      EXPECT_GT(var.span<float>()[i], 0.0f) << layer << ".running_var[" << i << "]";
    }
    EXPECT_GT(moved, 1e-3) << layer << ": the moving statistics never moved";
  }

  const std::string second = RunLauncher(run_dir, {"--job=" + ps, "--ps=2", "--workers=2"},
                                         {"taken with another layout", "final test accuracy"});
  ASSERT_FALSE(second.empty()) << "no summary";
  EXPECT_EQ(Field(second, "restored_from_step"), "400") << second;
  const std::string second_accuracy = Field(second, "accuracy");
  ASSERT_FALSE(second_accuracy.empty()) << second;
  EXPECT_GT(std::stod(second_accuracy), 0.75) << second;
  EXPECT_EQ(testing::ProcessesNaming(run_dir + "/cluster.json").size(), 0u);
}

}  // namespace
}  // namespace psrt
