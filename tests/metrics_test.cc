// /metrics on a running PS and worker: a real training cluster (chief, one
// PS, one worker, separate processes) serves Prometheus' text format on
// each daemon's --http_port; the figures move as training goes on, the
// pages pass Prometheus' own linter (promtool), and a real Prometheus
// server scrapes both and answers queries on them (skipped where Debian's
// prometheus package is not installed).
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "common/testing/python_tool.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"
// After Eigen (through the harness): <resolv.h>, which httplib includes,
// defines a macro `_res` that Eigen uses as a parameter name.
#include "httplib.h"

namespace psrt {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

// The page at http://127.0.0.1:port/path ("" if nothing answers 200).
std::string Get(int port, const std::string& path) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5);
  http.set_read_timeout(5);
  auto r = http.Get(path.c_str());
  return r && r->status == 200 ? r->body : "";
}

// The value of the sample written exactly `series` (name and labels) in a
// /metrics page; NaN if the page has none.
double Sample(const std::string& page, const std::string& series) {
  const std::string prefix = series + " ";
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
  }
  return NAN;
}

// Polls /metrics on `port` until `series` passes `above` (the page then),
// or "" after `timeout`.
std::string WaitForSampleAbove(int port, const std::string& series, double above, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string page;
  while (absl::Now() < deadline) {
    page = Get(port, "/metrics");
    if (Sample(page, series) > above) return page;
    absl::SleepFor(absl::Milliseconds(200));  // polling interval, not synchronisation
  }
  ADD_FAILURE() << series << " did not pass " << above << " within " << timeout << "; last page:\n" << page;
  return "";
}

// Runs promtool's linter on `page` (saved to `path`); whether it passed.
bool Linted(const std::string& page, const std::string& path) {
  std::ofstream(path) << page;
  return std::system(absl::StrCat(kPromtool, " check metrics < ", path).c_str()) == 0;
}

class MetricsTest : public testing::TrainingClusterTest {
 protected:
  void SetUp() override {
    Setup(/*ps=*/1, /*workers=*/1, ConsistencyDef::ASYNC, /*steps=*/1000000);
    auto a = PickFreePort(), b = PickFreePort();
    ASSERT_TRUE(a.ok() && b.ok());
    ps_port_ = *a;
    worker_port_ = *b;
  }
  int ps_port_ = 0, worker_port_ = 0;
};

TEST_F(MetricsTest, FiguresMoveAsTrainingGoesOn) {
  auto ps = Start("ps/server", "ps:0", {absl::StrCat("--http_port=", ps_port_)});
  ASSERT_NE(ps, nullptr);
  ASSERT_TRUE(ps->WaitForLine(absl::StrCat("ps:0: metrics http://localhost:", ps_port_, "/metrics"), absl::Minutes(1)));
  // Before any worker: served, zero.
  std::string idle = Get(ps_port_, "/metrics");
  EXPECT_EQ(Sample(idle, "psrt_ps_requests_total{task=\"ps:0\",method=\"push\"}"), 0) << idle;
  EXPECT_EQ(Sample(idle, "psrt_ps_store_role{task=\"ps:0\",store=\"0\",role=\"primary\"}"), 1) << idle;
  EXPECT_TRUE(Linted(idle, dir_ + "-ps-idle.txt")) << idle;
  EXPECT_EQ(Get(ps_port_, "/nothing"), "");

  auto worker = StartWorker(0, {absl::StrCat("--http_port=", worker_port_)});
  auto chief = StartChief();
  ASSERT_NE(worker, nullptr);
  ASSERT_NE(chief, nullptr);
  ASSERT_TRUE(worker->WaitForLine(absl::StrCat("worker:0: metrics http://localhost:", worker_port_, "/metrics"),
                                  absl::Minutes(1)));

  const std::string push = "psrt_ps_requests_total{task=\"ps:0\",method=\"push\"}";
  std::string first = WaitForSampleAbove(ps_port_, push, 20, absl::Minutes(3));
  ASSERT_FALSE(first.empty());
  std::string later = WaitForSampleAbove(ps_port_, push, Sample(first, push) + 20, absl::Minutes(2));
  ASSERT_FALSE(later.empty());
  for (const std::string& series :
       {std::string("psrt_ps_step{task=\"ps:0\"}"), std::string("psrt_ps_requests_total{task=\"ps:0\",method=\"pull\"}"),
        std::string("psrt_ps_request_bytes_total{task=\"ps:0\",method=\"push\"}"),
        std::string("psrt_ps_request_bytes_total{task=\"ps:0\",method=\"pull\"}"),
        std::string("psrt_ps_request_seconds_count{task=\"ps:0\",method=\"push\"}"),
        std::string("psrt_ps_apply_seconds_count{task=\"ps:0\"}")}) {
    EXPECT_GT(Sample(first, series), 0) << series << "\n" << first;
    EXPECT_GT(Sample(later, series), Sample(first, series)) << series << "\n" << later;
  }
  // Pull answers carry the MLP's variables (235146 floats each).
  const double pulls = Sample(later, "psrt_ps_requests_total{task=\"ps:0\",method=\"pull\"}");
  EXPECT_GE(Sample(later, "psrt_ps_request_bytes_total{task=\"ps:0\",method=\"pull\"}"), pulls * 235146 * 4) << later;
  EXPECT_EQ(Sample(later, "psrt_ps_request_errors_total{task=\"ps:0\",method=\"push\"}"), 0) << later;
  EXPECT_GT(Sample(later, "process_resident_memory_bytes{task=\"ps:0\"}"), 1 << 20) << later;
  EXPECT_EQ(Sample(later, "psrt_ps_variables{task=\"ps:0\"}"), 6) << later;
  EXPECT_TRUE(Linted(later, dir_ + "-ps.txt")) << later;

  // The worker's page: its step, pulls, pushes and compute move too.
  const std::string wstep = "psrt_worker_step{task=\"worker:0\"}";
  std::string w1 = WaitForSampleAbove(worker_port_, wstep, 10, absl::Minutes(2));
  ASSERT_FALSE(w1.empty());
  std::string w2 = WaitForSampleAbove(worker_port_, wstep, Sample(w1, wstep) + 20, absl::Minutes(2));
  ASSERT_FALSE(w2.empty());
  for (const std::string& series : {std::string("psrt_worker_requests_total{task=\"worker:0\",method=\"pull\"}"),
                                    std::string("psrt_worker_requests_total{task=\"worker:0\",method=\"push\"}"),
                                    std::string("psrt_worker_request_bytes_total{task=\"worker:0\",method=\"push\"}"),
                                    std::string("psrt_worker_request_seconds_count{task=\"worker:0\",method=\"pull\"}"),
                                    std::string("psrt_worker_compute_seconds_count{task=\"worker:0\"}"),
                                    std::string("psrt_worker_compute_seconds_sum{task=\"worker:0\"}")}) {
    EXPECT_GT(Sample(w1, series), 0) << series << "\n" << w1;
    EXPECT_GT(Sample(w2, series), Sample(w1, series)) << series << "\n" << w2;
  }
  // A push carries a gradient of every variable: as many bytes as a pull.
  const double pushes = Sample(w2, "psrt_worker_requests_total{task=\"worker:0\",method=\"push\"}");
  EXPECT_EQ(Sample(w2, "psrt_worker_request_bytes_total{task=\"worker:0\",method=\"push\"}"), pushes * 235146 * 4)
      << w2;
  EXPECT_EQ(Sample(w2, "psrt_worker_state{task=\"worker:0\",state=\"RUNNING\"}"), 1) << w2;
  const double loss = Sample(w2, "psrt_worker_loss{task=\"worker:0\"}");
  EXPECT_GT(loss, 0) << w2;
  EXPECT_LT(loss, 5) << w2;
  const double accuracy = Sample(w2, "psrt_worker_train_metric{task=\"worker:0\",name=\"accuracy\"}");
  EXPECT_GE(accuracy, 0) << w2;
  EXPECT_LE(accuracy, 1) << w2;
  EXPECT_GT(Sample(w2, "process_resident_memory_bytes{task=\"worker:0\"}"), 1 << 20) << w2;
  EXPECT_TRUE(Linted(w2, dir_ + "-worker.txt")) << w2;
}

// A real Prometheus (Debian's prometheus, which deploy/setup.sh installs)
// scrapes the daemons every second and answers queries on what it stored.
TEST_F(MetricsTest, PrometheusScrapesTheDaemons) {
  if (!Exists(kPrometheus)) GTEST_SKIP() << kPrometheus << " is not installed (deploy/setup.sh installs it)";
  auto ps = Start("ps/server", "ps:0", {absl::StrCat("--http_port=", ps_port_)});
  auto worker = StartWorker(0, {absl::StrCat("--http_port=", worker_port_)});
  auto chief = StartChief();
  ASSERT_TRUE(ps != nullptr && worker != nullptr && chief != nullptr);
  auto web = PickFreePort();
  ASSERT_TRUE(web.ok());
  const std::string config = dir_ + "-prometheus.yml";
  std::ofstream(config) << "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
                           "scrape_configs:\n"
                           "  - job_name: psrt\n"
                           "    static_configs: [{targets: ['127.0.0.1:"
                        << ps_port_ << "', '127.0.0.1:" << worker_port_ << "']}]\n";
  auto prometheus = testing::Daemon::Start(
      "prometheus", {kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir_ + "-tsdb",
                     absl::StrCat("--web.listen-address=127.0.0.1:", *web), "--log.level=warn"});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  // Each query answers once the scrapes have seen the figure move.
  for (const std::string& query : {std::string("psrt_ps_requests_total{method=\"push\",task=\"ps:0\"} > 10"),
                                   std::string("psrt_ps_step{task=\"ps:0\"} > 10"),
                                   std::string("psrt_worker_step{task=\"worker:0\"} > 10"),
                                   std::string("rate(psrt_worker_compute_seconds_count{task=\"worker:0\"}[5s]) > 0")}) {
    const absl::Time deadline = absl::Now() + absl::Minutes(2);
    std::string answer;
    while (absl::Now() < deadline) {
      httplib::Client http("127.0.0.1", *web);
      auto r = http.Get("/api/v1/query", httplib::Params{{"query", query}}, httplib::Headers{});
      answer = r ? r->body : "";
      if (answer.find("\"result\":[{") != std::string::npos) break;
      absl::SleepFor(absl::Milliseconds(500));  // polling interval
    }
    EXPECT_NE(answer.find("\"result\":[{"), std::string::npos) << query << ": " << answer;
    const int port = query.find("worker") != std::string::npos ? worker_port_ : ps_port_;
    EXPECT_NE(answer.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << query << ": " << answer;
  }
  // Both targets are up.
  httplib::Client http("127.0.0.1", *web);
  auto up = http.Get("/api/v1/query", httplib::Params{{"query", "sum(up{job=\"psrt\"})"}}, httplib::Headers{});
  ASSERT_TRUE(up);
  EXPECT_NE(up->body.find(",\"2\"]"), std::string::npos) << up->body;
}

// The chief's TensorBoard scalars, read back with TensorBoard's own
// EventAccumulator: each training point (loss, train/accuracy,
// learning_rate) is labelled with the step its loss came from, a step the
// worker had pushed when the point was written (the point at "step 0" was
// once a later step's loss); learning_rate follows the job's cosine
// schedule at that step.
TEST_F(MetricsTest, TensorBoardLabelsEachPointWithItsStep) {
  constexpr int64_t kSteps = 3000;
  job_.set_steps(kSteps);
  job_.set_log_dir(dir_ + "/logs");
  WriteJob();
  const std::string data_log = dir_ + "-pushed.txt";
  auto ps = StartPs(0);
  auto worker = StartWorker(0, {"--data_log=" + data_log});
  auto chief = StartChief();
  ASSERT_EQ(ExitCode(chief.get()), 0);
  // When each step was pushed: "generation step stream batch unix_ms".
  std::map<int64_t, double> pushed_at;
  {
    std::ifstream in(data_log);
    int64_t generation, step, stream, batch, ms;
    while (in >> generation >> step >> stream >> batch >> ms) pushed_at[step] = ms / 1e3;
  }
  ASSERT_EQ(pushed_at.size(), kSteps);
  const std::string scalars = dir_ + "-scalars.txt";
  ASSERT_TRUE(testing::RunPythonTool("tests/tools/read_events.py", {dir_ + "/logs", "--wall_time"}, scalars).ok());
  std::map<std::string, std::vector<std::pair<int64_t, double>>> points;  // tag -> (step, value)
  std::ifstream in(scalars);
  std::string tag;
  int64_t step;
  double value, wall;
  while (in >> tag >> step >> value >> wall) {
    points[tag].emplace_back(step, value);
    if (tag == "loss" || tag == "learning_rate" || tag.rfind("train/", 0) == 0) {
      ASSERT_TRUE(pushed_at.count(step)) << tag << " at step " << step << ": no such step was pushed";
      // Written after the step it names was pushed (10 ms for the clocks' rounding).
      EXPECT_LE(pushed_at[step], wall + 0.01) << tag << " at step " << step << " was written before that step was pushed";
    }
  }
  for (const char* t : {"loss", "train/accuracy", "learning_rate", "examples_per_sec", "eval/accuracy"}) {
    EXPECT_FALSE(points[t].empty()) << "no " << t << " scalar";
  }
  ASSERT_GE(points["loss"].size(), 2u);
  EXPECT_LT(points["loss"].back().first, kSteps);  // the last step is kSteps - 1
  for (size_t i = 1; i < points["loss"].size(); ++i) {
    EXPECT_GT(points["loss"][i].first, points["loss"][i - 1].first) << "loss points out of step order";
  }
  EXPECT_EQ(points["train/accuracy"].size(), points["loss"].size());
  for (const auto& [s, accuracy] : points["train/accuracy"]) {
    EXPECT_GE(accuracy, 0);
    EXPECT_LE(accuracy, 1);
  }
  // The job's schedule: 0.001 cosine-decayed over the run's kSteps updates,
  // at the PS's update count when the step's loss was reported (the PS and
  // the worker are asked one after the other: a few updates apart).
  auto cosine = [](double t) { return 0.001 * 0.5 * (1 + std::cos(M_PI * std::clamp(t, 0.0, 1.0 * kSteps) / kSteps)); };
  for (const auto& [s, lr] : points["learning_rate"]) {
    EXPECT_LE(lr, cosine(s - 50.0) * 1.001) << "learning_rate at step " << s;
    EXPECT_GE(lr, cosine(s + 50.0) * 0.999 - 1e-9) << "learning_rate at step " << s;
  }
}

}  // namespace
}  // namespace psrt
