// Early stopping (#25) through the launcher: a job whose evaluations cannot
// improve (a learning rate too small to move the test accuracy by
// min_delta) ends at the first evaluation after the first, well before its
// steps; the summary says where, and the final accuracy is still reported
// (the final checkpoint and evaluation are taken there, as at a normal end).
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/plan/job_planner.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::RunfilePath;

// `strategy`: the launcher's --strategy; `sync`: SYNC consistency.
void RunThatCannotImprove(const std::string& name, const std::string& strategy, bool sync) {
  SCOPED_TRACE(name);
  const std::string tmp = std::getenv("TEST_TMPDIR");
  auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  job->clear_epochs();
  job->set_steps(3000);
  job->mutable_optimizer()->Clear();
  job->mutable_optimizer()->mutable_sgd()->set_learning_rate(1e-7f);
  job->mutable_checkpoint()->set_every_steps(1000);
  job->mutable_eval()->set_every_steps(100);
  job->mutable_eval()->set_max_examples(1000);
  EarlyStoppingDef* e = job->mutable_eval()->mutable_early_stopping();
  e->set_monitor("accuracy");
  e->set_min_delta(0.05f);
  e->set_patience(1);
  if (sync) job->mutable_consistency()->set_mode(ConsistencyDef::SYNC);
  if (strategy == "multi_worker_mirrored") job->mutable_strategy()->mutable_multi_worker_mirrored();
  job->clear_summary_path();
  job->clear_log_dir();
  const std::string dir = tmp + "/" + name;
  const std::string job_path = testing::WriteJobFile(*job, dir + ".pbtxt");
  std::vector<std::string> argv = {RunfilePath("deploy/local_cluster"), "--job=" + job_path, "--run_dir=" + dir,
                                   "--workers=2", "--strategy=" + strategy};
  if (strategy == "parameter_server") argv.push_back("--ps=1");
  auto launcher = Daemon::Start("launcher", argv);
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = (*launcher)->Wait(absl::Minutes(3));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << DescribeWaitStatus(*status);

  const std::string said = (*launcher)->WaitForMatch(
      "early stopping: accuracy did not improve by 0.05 for 1 evaluation; ending at step [0-9]+", absl::Seconds(1));
  ASSERT_FALSE(said.empty());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(said, m, std::regex("ending at step ([0-9]+)")));
  int64_t end = 0;
  ASSERT_TRUE(absl::SimpleAtoi(m[1].str(), &end));
  EXPECT_GE(end, 200);  // the second evaluation's step at least
  EXPECT_LT(end, 1000);

  std::ifstream in(dir + "/summary.json");
  std::stringstream summary;
  summary << in.rdbuf();
  EXPECT_NE(summary.str().find(absl::StrCat("\"stopped_early_at_step\": ", end)), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find(absl::StrCat("\"steps\": ", end, ",")), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find("\"total_steps\": 3000"), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find("\"accuracy\": "), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find(absl::StrCat(end, "]")), std::string::npos)
      << "the final checkpoint is at the early end: " << summary.str();
  EXPECT_TRUE((*launcher)->WaitForLine("final test accuracy ", absl::Seconds(1)));
  EXPECT_TRUE((*launcher)->WaitForLine(absl::StrCat("stopped early at step ", end), absl::Seconds(1)));
  // Said once (the merged log has each progress line of the chief's as
  // printed, "[chief:0] ...", and again as glog wrote it).
  std::ifstream log(dir + "/cluster.log");
  int times = 0;
  for (std::string line; std::getline(log, line);) times += line.rfind("[chief:0] early stopping: ", 0) == 0;
  EXPECT_EQ(times, 1);
}

TEST(EarlyStoppingTest, AnAsyncRunThatCannotImproveEndsEarlyWithItsFinalMetric) {
  RunThatCannotImprove("async", "parameter_server", false);
}

// SYNC: the end is where the furthest worker stands, at most one step past
// the group's (the step its push already went into), and both run to it.
TEST(EarlyStoppingTest, ASyncRunThatCannotImproveEndsEarly) { RunThatCannotImprove("sync", "parameter_server", true); }

// A collective group stops at one step (the pause is agreed in the
// all-reduce) and runs to the end together.
TEST(EarlyStoppingTest, AMirroredRunThatCannotImproveEndsEarly) {
  RunThatCannotImprove("mirrored", "multi_worker_mirrored", false);
}

// A chief that finds the decision in the job state (its predecessor
// decided, then died) ends the run at that step.
TEST(EarlyStoppingTest, AChiefThatFindsTheDecisionInTheJobStateEndsThere) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  job->clear_epochs();
  job->set_steps(3000);
  job->mutable_eval()->set_every_steps(1000);
  job->mutable_eval()->set_max_examples(1000);
  job->mutable_eval()->mutable_early_stopping()->set_monitor("accuracy");
  job->clear_summary_path();
  job->clear_log_dir();
  const std::string dir = tmp + "/decided";
  ChiefJobState state;
  state.set_generation(7);
  state.set_stopped_early_at_step(250);
  ASSERT_TRUE(ManifestStore(dir + "/checkpoints").WriteJobState(state).ok());
  const std::string job_path = testing::WriteJobFile(*job, tmp + "/decided.pbtxt");
  auto launcher = Daemon::Start("launcher", {RunfilePath("deploy/local_cluster"), "--job=" + job_path,
                                             "--run_dir=" + dir, "--ps=1", "--workers=2"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = (*launcher)->Wait(absl::Minutes(3));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << DescribeWaitStatus(*status);
  EXPECT_TRUE((*launcher)->WaitForLine("early stopping decided before: ending at step 250", absl::Seconds(1)));
  std::ifstream in(dir + "/summary.json");
  std::stringstream summary;
  summary << in.rdbuf();
  EXPECT_NE(summary.str().find("\"stopped_early_at_step\": 250"), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find("\"steps\": 250,"), std::string::npos) << summary.str();
  EXPECT_TRUE((*launcher)->WaitForLine("final test accuracy ", absl::Seconds(1)));
  // Still recorded once the job is done.
  absl::StatusOr<ChiefJobState> after = ManifestStore(dir + "/checkpoints").ReadJobState();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->stopped_early_at_step(), 250);
}

}  // namespace
}  // namespace psrt
