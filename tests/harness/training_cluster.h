// A fixture for tests that run whole clusters of real processes on
// loopback (chief, parameter servers, workers) training the Fashion-MNIST
// MLP: a job file per test, daemons started with the test's cluster spec,
// and the chief's JSON summary read back.
#ifndef PSRT_TESTS_HARNESS_TRAINING_CLUSTER_H_
#define PSRT_TESTS_HARNESS_TRAINING_CLUSTER_H_

#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan/job_planner.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace testing {

// Writes `job` as a text job file at `path` and returns `path`.
inline std::string WriteJobFile(const TrainingJob& job, const std::string& path) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  std::ofstream(path) << text;
  return path;
}

// The first number `pattern` (a regex with one group) finds in a summary;
// -1 when there is none.
inline double SummaryNumber(const std::string& summary, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(summary, m, std::regex(pattern))) return -1;
  return std::stod(m[1]);
}

// One leg of a job continued across runs: the local launcher trains `job`
// in `run_dir` (going on from its last checkpoint) with `flags`, to its
// end; `another_layout`: the leg must say its checkpoint was taken with
// another layout. Returns the summary the chief wrote ("" after a failure
// the test has been told of).
inline std::string RunLauncherLeg(const std::string& name, const TrainingJob& job, const std::string& run_dir,
                                  const std::vector<std::string>& flags, bool another_layout) {
  const std::string job_path = WriteJobFile(job, run_dir + "-" + name + ".pbtxt");
  std::vector<std::string> argv = {RunfilePath("deploy/local_cluster"), "--job=" + job_path, "--run_dir=" + run_dir};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto launcher = Daemon::Start(name, argv);
  if (!launcher.ok()) {
    ADD_FAILURE() << name << ": " << launcher.status();
    return "";
  }
  if (another_layout) {
    EXPECT_TRUE((*launcher)->WaitForLine("was taken with another layout", absl::Minutes(2))) << name;
  }
  auto status = (*launcher)->Wait(absl::Minutes(4));
  if (!(status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) {
    ADD_FAILURE() << name << ": the launcher did not finish cleanly";
    return "";
  }
  std::ifstream in(run_dir + "/summary.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::cerr << "FIGURE: " << name << " " << absl::StrJoin(flags, " ") << " summary " << ss.str() << std::endl;
  return ss.str();
}

// The MLP example run until the test ends it, with no checkpoint or
// evaluation of its own; checkpoints (when asked for) go to `checkpoint_dir`.
inline TrainingJob EndlessMlpJob(const std::string& checkpoint_dir) {
  auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return TrainingJob();
  job->set_steps(1000000);
  job->set_epochs(0);
  job->mutable_checkpoint()->set_every_steps(0);
  job->mutable_checkpoint()->set_dir(checkpoint_dir);
  job->mutable_eval()->set_every_steps(0);
  job->clear_log_dir();
  return *job;
}

class TrainingClusterTest : public ::testing::Test {
 protected:
  void Setup(int ps, int workers, ConsistencyDef::Mode mode, int64_t steps) {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name_);
    auto c = MakeTestCluster(ps, workers, name_);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *c;
    auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    job_.set_steps(steps);
    job_.set_epochs(0);
    job_.mutable_consistency()->set_mode(mode);
    job_.mutable_checkpoint()->set_dir(dir_ + "/ckpt");
    job_.mutable_checkpoint()->set_every_steps(200);
    job_.mutable_eval()->set_every_steps(0);
    job_.mutable_eval()->set_max_examples(2000);
    job_.mutable_failure()->set_heartbeat_timeout_ms(2000);
    job_.mutable_failure()->set_sync_wait_for_worker_ms(60000);
    job_.mutable_failure()->set_register_deadline_ms(30000);
    job_.set_summary_path(dir_ + "/summary.json");
    WriteJob();
  }
  void WriteJob() { job_path_ = WriteJobFile(job_, dir_ + ".pbtxt"); }
  std::vector<std::string> Common(const std::string& task) {
    std::vector<std::string> flags = {"--cluster_spec=" + cluster_.spec_path, "--task=" + task};
    if (task.rfind("ps:", 0) != 0) flags.push_back("--threads=1");
    // The directory above the job's checkpoint dir: the PS keeps its shards
    // of checkpoint "ckpt" in dir_/ckpt/ps-N, beside the chief's manifests.
    if (task.rfind("ps:", 0) == 0) flags.push_back("--snapshot_dir=" + dir_);
    return flags;
  }
  std::unique_ptr<Daemon> Start(const std::string& binary, const std::string& task,
                                std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {RunfilePath(binary)};
    for (auto& a : Common(task)) argv.push_back(a);
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto d = Daemon::Start(task, argv);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : nullptr;
  }
  std::unique_ptr<Daemon> StartPs(int i) { return Start("ps/server", absl::StrCat("ps:", i)); }
  std::unique_ptr<Daemon> StartWorker(int i, std::vector<std::string> extra = {}) {
    return Start("worker/main", absl::StrCat("worker:", i), extra);
  }
  std::unique_ptr<Daemon> StartChief(std::vector<std::string> extra = {}) {
    extra.push_back("--job=" + job_path_);
    return Start("chief/main", "chief:0", extra);
  }
  std::string Summary() {
    std::ifstream in(dir_ + "/summary.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  double Field(const std::string& summary, const std::string& key) {
    std::smatch m;
    std::regex re("\"" + key + "\": (-?[0-9.e+-]+)");
    if (!std::regex_search(summary, m, re)) return NAN;
    return std::stod(m[1]);
  }
  // TF_CONFIG=... for task TYPE:INDEX of the cluster in `spec_path`, as a
  // TFJob or a scaled StatefulSet writes it for a new pod.
  static std::string TfConfig(const std::string& spec_path, const std::string& type, int index) {
    std::ifstream in(spec_path);
    std::stringstream cluster_json;
    cluster_json << in.rdbuf();
    return absl::StrCat("TF_CONFIG={\"cluster\": ", cluster_json.str(), ", \"task\": {\"type\": \"", type,
                        "\", \"index\": ", index, "}}");
  }
  // True once the chief reports a step of at least `step` (false after 3 minutes).
  bool WaitForStep(Daemon* chief, int64_t step) {
    const absl::Time deadline = absl::Now() + absl::Minutes(3);
    size_t from = 0;
    while (absl::Now() < deadline) {
      std::string line = chief->WaitForMatch("step [0-9]+/", deadline - absl::Now(), from);
      if (line.empty()) return false;
      from = chief->lines();
      std::smatch m;
      if (std::regex_search(line, m, std::regex("step ([0-9]+)/")) && std::stoll(m[1]) >= step) return true;
    }
    return false;
  }
  int ExitCode(Daemon* d, absl::Duration timeout = absl::Minutes(5)) {
    auto s = d->Wait(timeout);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() && WIFEXITED(*s) ? WEXITSTATUS(*s) : -1;
  }

  std::string name_, dir_, job_path_;
  testing::TestCluster cluster_;
  TrainingJob job_;
};

// Each stream's batches (stream -> the batch numbers trained, from the
// workers' --data_log files) trained once, from 0 without a gap: a failure
// names the stream and what was doubled or skipped. Returns how many
// batches there were in all.
template <typename Stream>
int64_t ExpectEachBatchOnce(const std::map<Stream, std::multiset<int64_t>>& trained) {
  int64_t total = 0;
  for (const auto& [stream, batches] : trained) {
    const int64_t n = static_cast<int64_t>(batches.size());
    total += n;
    int doubled = 0, missing = 0;
    for (int64_t b = 0; b < n; ++b) {
      doubled += batches.count(b) > 1;
      missing += batches.count(b) == 0;
    }
    EXPECT_EQ(doubled, 0) << "stream " << stream << ": batches trained twice";
    EXPECT_EQ(missing, 0) << "stream " << stream << ": batches skipped (read " << n << ", last "
                          << *batches.rbegin() << ")";
  }
  return total;
}

// The batches of each stream in the workers' --data_log files `paths`
// (lines "generation step stream batch ms"), every line counted.
inline std::map<int64_t, std::multiset<int64_t>> ReadDataLogs(const std::vector<std::string>& paths) {
  std::map<int64_t, std::multiset<int64_t>> trained;
  for (const std::string& path : paths) {
    std::ifstream f(path);
    int64_t generation, step, stream, batch, ms;
    while (f >> generation >> step >> stream >> batch >> ms) trained[stream].insert(batch);
  }
  return trained;
}

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_TESTS_HARNESS_TRAINING_CLUSTER_H_
