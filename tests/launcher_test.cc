// The local launcher end to end: a short job on a real local cluster, a PS
// killed mid-run, the summary's accuracy and failures, and no child left;
// the evaluator task beside training, read back with TensorBoard's reader.
#include <signal.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/plan/job_planner.h"
#include "common/testing/python_tool.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

// The MLP example as a job file beside `dir`: `steps` steps, a checkpoint
// every `every` steps, evaluation on `eval_examples` test examples.
std::string WriteMlpJob(const std::string& dir, int64_t steps, int64_t every, int64_t eval_examples) {
  auto job = LoadJob(testing::RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return "";
  job->set_epochs(0);
  job->set_steps(steps);
  job->mutable_checkpoint()->set_every_steps(every);
  job->mutable_eval()->set_max_examples(eval_examples);
  return testing::WriteJobFile(*job, dir + ".pbtxt");
}

// The port of the first line the launcher prints matching `pattern` (whose
// URL names localhost:PORT), or 0 after `timeout`.
int PrintedPort(testing::Daemon* launcher, const std::string& pattern, absl::Duration timeout) {
  std::string line = launcher->WaitForMatch(pattern, timeout);
  size_t at = line.find("localhost:");
  return at == std::string::npos ? 0 : std::stoi(line.substr(at + 10));
}

// The /metrics page on `port`, saved to `path` and passed through
// Prometheus' own linter; "" (and a failure) if nothing answers.
std::string LintedMetrics(int port, const std::string& path) {
  httplib::Client http("127.0.0.1", port);
  auto metrics = http.Get("/metrics");
  if (!metrics || metrics->status != 200) {
    ADD_FAILURE() << "no /metrics on port " << port;
    return "";
  }
  std::ofstream(path) << metrics->body;
  EXPECT_EQ(std::system(("/usr/bin/promtool check metrics < " + path).c_str()), 0) << metrics->body;
  return metrics->body;
}

std::string ReadSummary(const std::string& dir) {
  std::ifstream in(dir + "/summary.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for the launcher to exit 0 and checks the summary's accuracy
// (above 0.75); returns the summary.
std::string FinishedSummary(testing::Daemon* launcher, const std::string& dir) {
  auto status = launcher->Wait(absl::Minutes(5));
  EXPECT_TRUE(status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << (status.ok() ? DescribeWaitStatus(*status) : status.status().ToString());
  std::string summary = ReadSummary(dir);
  std::smatch m;
  EXPECT_TRUE(std::regex_search(summary, m, std::regex("\"accuracy\": ([0-9.]+)"))) << summary;
  EXPECT_GT(m.empty() ? 0 : std::stod(m[1]), 0.75) << summary;
  return summary;
}

TEST(LauncherTest, TrainsSurvivesAPsKillAndLeavesNoChildBehind) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/launcher");
  const std::string job_path = WriteMlpJob(dir, 1500, 200, 2000);
  ASSERT_FALSE(job_path.empty());

  auto launcher = testing::Daemon::Start(
      "launcher", {testing::RunfilePath("deploy/local_cluster"), "--job=" + job_path, "--run_dir=" + dir,
                   "--ps=2", "--workers=1", "--kill=ps:1@400"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  // The chief's /metrics, live, passes Prometheus' own linter.
  int port = PrintedPort(launcher->get(), "status page http://localhost:[0-9]+/", absl::Minutes(3));
  ASSERT_NE(port, 0);
  EXPECT_NE(LintedMetrics(port, dir + "-metrics.txt").find("psrt_step "), std::string::npos);
  ASSERT_TRUE((*launcher)->WaitForLine("killed ps:1 with SIGKILL", absl::Minutes(3)));
  ASSERT_TRUE((*launcher)->WaitForLine("recovered to the checkpoint", absl::Minutes(2)));
  std::string summary = FinishedSummary(launcher->get(), dir);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("\"failures_survived\": ([0-9]+)"))) << summary;
  EXPECT_EQ(std::stoi(m[1]), 1) << summary;
  EXPECT_EQ(testing::ProcessesNaming(dir + "/cluster.json").size(), 0u);
}

// Every daemon under mutual TLS and per-role tokens at once: the calls a
// job really makes (pulls for evaluation, snapshots, a restore after a PS
// dies) are all within their callers' roles.
TEST(LauncherTest, TrainsAndRecoversUnderTlsAndRoleTokens) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/roles");
  const std::string job_path = WriteMlpJob(dir, 3000, 100, 1000);
  ASSERT_FALSE(job_path.empty());

  auto launcher = testing::Daemon::Start(
      "launcher", {testing::RunfilePath("deploy/local_cluster"), "--job=" + job_path, "--run_dir=" + dir,
                   "--ps=2", "--workers=1", "--kill=ps:1@250", "--tls", "--role_tokens"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE((*launcher)->WaitForLine("per-role tokens in", absl::Minutes(1)));
  ASSERT_TRUE((*launcher)->WaitForLine("recovered to the checkpoint", absl::Minutes(4)));
  auto status = (*launcher)->Wait(absl::Minutes(5));
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << DescribeWaitStatus(*status);
  std::smatch m;
  std::string summary = ReadSummary(dir);
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("\"failures_survived\": ([0-9]+)"))) << summary;
  EXPECT_EQ(std::stoi(m[1]), 1) << summary;
  std::ifstream log(dir + "/cluster.log");
  std::string line;
  while (std::getline(log, line)) {
    EXPECT_EQ(line.find("PERMISSION_DENIED"), std::string::npos) << line;
    EXPECT_EQ(line.find("may not call"), std::string::npos) << line;
  }
  EXPECT_EQ(testing::ProcessesNaming(dir + "/cluster.json").size(), 0u);
}

// --evaluator: the evaluator follows the committed checkpoints while the
// job trains; TensorBoard's own reader finds its accuracy at several
// steps, the last one the chief's final checkpoint with the chief's final
// accuracy (the same weights, the same test examples); its /metrics
// answers while it runs and passes Prometheus' linter.
TEST(LauncherTest, TheEvaluatorFollowsCheckpointsIntoTensorBoard) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/evaluator");
  const std::string job_path = WriteMlpJob(dir, 3000, 500, 2000);
  ASSERT_FALSE(job_path.empty());
  auto launcher = testing::Daemon::Start(
      "launcher", {testing::RunfilePath("deploy/local_cluster"), "--job=" + job_path, "--run_dir=" + dir,
                   "--ps=2", "--workers=1", "--evaluator"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  int port = PrintedPort(launcher->get(), "evaluator: metrics http://localhost:[0-9]+/metrics", absl::Minutes(2));
  ASSERT_NE(port, 0);
  // Its first evaluation (the chief's base checkpoint at step 0 comes first).
  ASSERT_TRUE((*launcher)->WaitForLine("evaluator: evaluated step", absl::Minutes(2)));
  std::string metrics = LintedMetrics(port, dir + "-evaluator-metrics.txt");
  EXPECT_NE(metrics.find("psrt_evaluator_metric{name=\"accuracy\"} "), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("psrt_evaluator_evaluated_total 0\n"), std::string::npos) << metrics;

  auto status = (*launcher)->Wait(absl::Minutes(4));
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << DescribeWaitStatus(*status);
  EXPECT_TRUE((*launcher)->WaitForLine("the job is finished; last checkpoint evaluated: step 3000", absl::Seconds(1)));
  EXPECT_TRUE((*launcher)->WaitForLine(" 0 failed; last step 3000", absl::Seconds(1)));

  std::string summary = ReadSummary(dir);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("\"accuracy\": ([0-9.]+)"))) << summary;
  const double chief_accuracy = std::stod(m[1]);

  const std::string scalars = dir + "-evaluator-scalars.txt";
  ASSERT_TRUE(testing::RunPythonTool("tests/tools/read_events.py", {dir + "/logs/evaluator"}, scalars).ok());
  std::ifstream events(scalars);
  std::vector<std::pair<int64_t, double>> accuracy;  // (step, value), as the reader orders them
  std::string tag;
  int64_t step;
  double value;
  while (events >> tag >> step >> value) {
    if (tag == "eval/accuracy") accuracy.emplace_back(step, value);
  }
  ASSERT_GE(accuracy.size(), 3u) << "evaluated fewer than 3 checkpoints, see " << scalars;
  for (size_t i = 1; i < accuracy.size(); ++i) EXPECT_LT(accuracy[i - 1].first, accuracy[i].first);
  EXPECT_EQ(accuracy.back().first, 3000);
  EXPECT_NEAR(accuracy.back().second, chief_accuracy, 1e-4) << summary;
  EXPECT_GT(accuracy.back().second, accuracy.front().second);  // training shows in the curve
  EXPECT_EQ(testing::ProcessesNaming(dir + "/cluster.json").size(), 0u);
}

// --scale: a worker beyond the spec joins at one step, then two leave
// (SIGTERM) at another; the job ends as usual, with every process gone.
TEST(LauncherTest, ScalesWorkersUpAndDownWhileTraining) {
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/scale");
  auto job = LoadJob(testing::RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  job->set_epochs(0);
  job->set_steps(1500);
  job->mutable_checkpoint()->set_every_steps(500);
  job->mutable_eval()->set_max_examples(2000);
  job->mutable_failure()->set_max_workers(3);
  const std::string job_path = testing::WriteJobFile(*job, dir + ".pbtxt");

  auto launcher = testing::Daemon::Start(
      "launcher", {testing::RunfilePath("deploy/local_cluster"), "--job=" + job_path, "--run_dir=" + dir, "--ps=1",
                   "--workers=2", "--scale=worker:3@300,worker:1@800"});
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE((*launcher)->WaitForLine("scaling to 3 workers at step", absl::Minutes(3)));
  ASSERT_TRUE((*launcher)->WaitForLine("membership: worker:2 joins", absl::Minutes(1)));
  ASSERT_TRUE((*launcher)->WaitForLine("stopped (SIGTERM) worker:1, worker:2", absl::Minutes(3)));
  EXPECT_FALSE((*launcher)->WaitForMatch("membership: .*worker:2 leaves at step", absl::Minutes(1)).empty());
  FinishedSummary(launcher->get(), dir);
  EXPECT_EQ(testing::ProcessesNaming(dir + "/cluster").size(), 0u);
}

// The launcher run with `flag` alone says `message` and exits 2.
void ExpectRefused(const std::string& flag, const std::string& run, const std::string& message) {
  auto launcher = testing::Daemon::Start(
      "launcher", {testing::RunfilePath("deploy/local_cluster"), flag,
                   "--run_dir=" + absl::StrCat(std::getenv("TEST_TMPDIR"), "/", run)});
  ASSERT_TRUE(launcher.ok());
  EXPECT_TRUE((*launcher)->WaitForLine(message, absl::Minutes(1)));
  auto status = (*launcher)->Wait(absl::Minutes(1));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(WEXITSTATUS(*status), 2);
}

TEST(LauncherTest, BadScaleFlagIsRefused) {
  // ps:N@STEP is a form now (elastic PS); a chief is not scaled.
  ExpectRefused("--scale=chief:3@10", "badscale", "--scale=chief:3@10: expected worker:N@STEP or ps:N@STEP");
  ExpectRefused("--scale=ps:0@10", "badscale0", "--scale=ps:0@10: expected worker:N@STEP or ps:N@STEP");
}

TEST(LauncherTest, BadKillFlagIsRefused) {
  ExpectRefused("--kill=ps:7@10", "bad", "--kill=ps:7@10: expected TASK@STEP");
}

}  // namespace
}  // namespace psrt
