// A run either ends with its final metric or says it has none and exits
// non-zero. Once, a test split that could not be read let a whole job train
// and end with "final test accuracy ?", empty metrics and exit status 0.
//
// Before training: the chief refuses a job whose test split does not read
// (exit 2), before it even listens. After training: a test split that went
// away during the run leaves the final evaluation failed; the chief exits 3,
// the launcher says so and exits 3, and the summary names the error. The
// same run checks the progress line: a 4-epoch job ends at "epoch 4", never
// "epoch 5" (the last batch of each epoch starts the next pass).
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/plan/job_planner.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::RunfilePath;

TEST(FinalMetricTest, AJobWhoseTestSplitDoesNotReadFailsBeforeTraining) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  job->mutable_input()->mutable_test()->set_files(0, tmp + "/missing-t10k-images-idx3-ubyte.gz");
  const std::string job_path = testing::WriteJobFile(*job, tmp + "/bad_test.pbtxt");
  auto cluster = testing::MakeTestCluster(1, 1, "bad_test");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto chief = Daemon::Start("chief", {RunfilePath("chief/main"), "--cluster_spec=" + cluster->spec_path,
                                       "--job=" + job_path, "--checkpoint_dir=" + tmp + "/bad_test_ckpt"});
  ASSERT_TRUE(chief.ok()) << chief.status();
  absl::StatusOr<int> status = (*chief)->Wait(absl::Seconds(60));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 2) << DescribeWaitStatus(*status);
  EXPECT_TRUE((*chief)->WaitForLine(
      "error: input.test: the test split cannot be read, so the job would end with no final metric", absl::Seconds(1)));
  EXPECT_TRUE((*chief)->WaitForLine(tmp + "/missing-t10k-images-idx3-ubyte.gz", absl::Seconds(1)));
  EXPECT_FALSE((*chief)->WaitForLine("serving at", absl::ZeroDuration())) << "it started before refusing";
}

// A job a worker refuses (more device replicas than the worker has cores;
// the chief's planner allows up to 64) ends the run at once with the
// worker's reason: the chief exits 4 and the launcher does not restart it
// (it used to restart the chief five times, each refused the same way).
TEST(FinalMetricTest, AJobAWorkerRefusesEndsTheRunWithItsReasonAndNoRestart) {
  if (std::thread::hardware_concurrency() >= 64) GTEST_SKIP() << "a worker here takes 64 devices";
  const std::string tmp = std::getenv("TEST_TMPDIR");
  auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp_devices.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  job->mutable_strategy()->mutable_mirrored()->set_devices(64);
  job->clear_summary_path();
  job->clear_log_dir();
  const std::string job_path = testing::WriteJobFile(*job, tmp + "/devices64.pbtxt");
  auto launcher = Daemon::Start("launcher", {RunfilePath("deploy/local_cluster"), "--job=" + job_path,
                                             "--run_dir=" + tmp + "/refused"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = (*launcher)->Wait(absl::Minutes(3));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 4) << DescribeWaitStatus(*status);
  EXPECT_FALSE((*launcher)
                   ->WaitForMatch("error: worker:0 refuses its assignment: .*local_devices: 64 is not in \\[0, ",
                                  absl::Seconds(1))
                   .empty());
  EXPECT_TRUE((*launcher)->WaitForLine("the job cannot run as written", absl::Seconds(1)));
  EXPECT_FALSE((*launcher)->WaitForLine("restarting chief:0", absl::ZeroDuration())) << "the chief was restarted";
}

TEST(FinalMetricTest, ARunThatEndsWithoutItsFinalMetricExitsNonZero) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  // The test split from copies this test takes away once training runs.
  const std::string images = tmp + "/t10k-images-idx3-ubyte.gz", labels = tmp + "/t10k-labels-idx1-ubyte.gz";
  std::filesystem::copy_file(job->input().test().files(0), images);
  std::filesystem::copy_file(job->input().test().labels_file(), labels);
  job->mutable_input()->mutable_test()->set_files(0, images);
  job->mutable_input()->mutable_test()->set_labels_file(labels);
  job->set_epochs(4);  // 2 workers: 469 steps an epoch, 16 examples of the next pass in each epoch's last batch
  job->mutable_eval()->set_max_examples(1000);
  job->clear_summary_path();
  job->clear_log_dir();
  const std::string dir = tmp + "/run";
  const std::string job_path = testing::WriteJobFile(*job, tmp + "/four_epochs.pbtxt");
  auto launcher = Daemon::Start("launcher", {RunfilePath("deploy/local_cluster"), "--job=" + job_path,
                                             "--run_dir=" + dir, "--ps=1", "--workers=2"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_FALSE((*launcher)->WaitForMatch("^step [1-9][0-9]*/1876 ", absl::Minutes(3)).empty());
  std::filesystem::remove(images);

  absl::StatusOr<int> status = (*launcher)->Wait(absl::Minutes(5));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << DescribeWaitStatus(*status);
  EXPECT_TRUE((*launcher)->WaitForLine("error: training finished at step 1876 but its final evaluation failed",
                                       absl::Seconds(1)));
  EXPECT_TRUE((*launcher)->WaitForLine("error: no final metric: the final evaluation failed: ", absl::Seconds(1)));
  EXPECT_FALSE((*launcher)->WaitForLine("final test accuracy", absl::ZeroDuration()));
  std::ifstream in(dir + "/summary.json");
  std::stringstream summary;
  summary << in.rdbuf();
  EXPECT_NE(summary.str().find("\"metrics\": {}"), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find("\"final_evaluation_error\": \""), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find(images), std::string::npos) << summary.str();

  // The progress line: the last says epoch 4 of the 4, none epoch 5.
  EXPECT_FALSE((*launcher)->WaitForMatch("^step 1876/1876 \\(100\\.0%\\) epoch 4 ", absl::ZeroDuration()).empty());
  EXPECT_TRUE((*launcher)->WaitForMatch("^step .* epoch 5 ", absl::ZeroDuration()).empty());
}

}  // namespace
}  // namespace psrt
