#include "chief/http_status.h"

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

JobStatusResponse Sample() {
  JobStatusResponse s;
  s.set_state(JobStatusResponse::RECOVERING);
  s.set_step(1234);
  s.set_loss(0.25f);
  s.set_examples_per_sec(9000);
  s.set_last_checkpoint_step(1200);
  s.set_failures_survived(2);
  s.add_member("worker:1");
  s.add_member("worker:2");
  s.set_membership_changes(3);
  TaskInfo* t = s.add_task();
  t->mutable_task()->set_job("ps");
  t->set_address("127.0.0.1:1");
  t->set_incarnation(5);
  s.set_eval_step(1200);
  (*s.mutable_eval_metric())["accuracy"] = 0.875f;
  (*s.mutable_eval_metric())["loss"] = 0.5f;
  (*s.mutable_train_metric())["accuracy"] = 0.75f;
  s.set_loss_step(1233);
  s.set_learning_rate(0.0005f);
  return s;
}

TEST(HttpStatusTest, ServesMetricsThatPromtoolAcceptsAndAStatusPage) {
  HttpStatusServer http([] { return Sample(); }, 5000);
  ASSERT_TRUE(http.Start("127.0.0.1", 0).ok());
  httplib::Client client("127.0.0.1", http.port());
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << "no answer";
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("psrt_step 1234\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_failures_survived_total 2\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_workers 2\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_membership_changes_total 3\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_job_state{state=\"RECOVERING\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_task_registered{task=\"ps:0\"} 1\n"));
  // The last evaluation, the training metrics and the learning rate.
  EXPECT_THAT(metrics->body, HasSubstr("psrt_eval_step 1200\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_eval_metric{name=\"accuracy\"} 0.875\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_eval_metric{name=\"loss\"} 0.5\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_train_metric{name=\"accuracy\"} 0.75\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_loss_step 1233\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_learning_rate 0.0005"));

  // Prometheus' own linter (Debian's prometheus package) accepts the text.
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/metrics.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(metrics->body.c_str(), f);
  std::fclose(f);
  int rc = std::system(("/usr/bin/promtool check metrics < " + path).c_str());
  EXPECT_EQ(rc, 0);

  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->body, HasSubstr("psrt job: RECOVERING"));
  EXPECT_THAT(page->body, HasSubstr("step 1234 / 5000"));
  EXPECT_THAT(page->body, HasSubstr("workers training (2): worker:1, worker:2; membership changes 3"));
  http.Stop();
}

// Addresses and error text come from peers: escaped, they are text, not markup.
TEST(HttpStatusTest, PeerTextIsEscapedOnThePage) {
  JobStatusResponse s = Sample();
  s.set_error("ps:0 said <script>alert('x')</script> & left");
  s.mutable_task(0)->set_address("<img src=x onerror=alert(1)>:1");
  std::string page = StatusPage(s, 0);
  EXPECT_EQ(page.find("<script>"), std::string::npos) << page;
  EXPECT_EQ(page.find("<img"), std::string::npos) << page;
  EXPECT_THAT(page, HasSubstr("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; left"));
  EXPECT_THAT(page, HasSubstr("&lt;img src=x onerror=alert(1)&gt;:1"));
}

// Failing checkpoints and what the chief waits for are loud on both pages.
TEST(HttpStatusTest, CheckpointFailuresAndWaitsAreShown) {
  JobStatusResponse s = Sample();
  s.set_checkpoint_failures(3);
  s.set_checkpoint_error("ps:1 snapshot of step 1400 failed: <no space>");
  s.set_waiting_for("ps:1 (not answering for 2m)");
  std::string page = StatusPage(s, 0);
  EXPECT_THAT(page, HasSubstr("warning: 3 checkpoints failed in a row</b> (progress since step 1200 is at risk)"));
  EXPECT_THAT(page, HasSubstr("failed: &lt;no space&gt;"));
  EXPECT_THAT(page, HasSubstr("waiting for ps:1 (not answering for 2m)"));
  EXPECT_THAT(PrometheusMetrics(s, 0), HasSubstr("psrt_checkpoint_failures 3\n"));
  EXPECT_EQ(StatusPage(Sample(), 0).find("warning"), std::string::npos);
}

// Replicated shards: each store's copies and state, and the failovers, on
// both pages; a job without replicas shows none of it.
TEST(HttpStatusTest, ReplicaHealthIsShown) {
  JobStatusResponse s = Sample();
  s.set_failovers(1);
  s.set_rebuilds(1);
  JobStatusResponse::Replica* r = s.add_replica();
  r->set_store(0);
  r->set_primary("ps:1");
  r->set_epoch(1700000000123);
  r->set_state(JobStatusResponse::Replica::UNREPLICATED);
  r = s.add_replica();
  r->set_store(1);
  r->set_primary("ps:1");
  r->set_backup("ps:<2>");
  r->set_epoch(1700000000123);
  r->set_state(JobStatusResponse::Replica::REPLICATED);
  const std::string metrics = PrometheusMetrics(s, 0);
  EXPECT_THAT(metrics, HasSubstr("psrt_failovers_total 1\n"));
  EXPECT_THAT(metrics, HasSubstr("psrt_rebuilds_total 1\n"));
  EXPECT_THAT(metrics, HasSubstr("psrt_replica_state{store=\"0\",primary=\"ps:1\",backup=\"\",state=\"unreplicated\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("psrt_replica_state{store=\"0\",primary=\"ps:1\",backup=\"\",state=\"replicated\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("psrt_replica_state{store=\"1\",primary=\"ps:1\",backup=\"ps:<2>\",state=\"replicated\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("psrt_replica_state{store=\"1\",primary=\"ps:1\",backup=\"ps:<2>\",state=\"rebuilding\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("psrt_replica_epoch{store=\"1\"} 1700000000123\n"));
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/replica_metrics.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(metrics.c_str(), f);
  std::fclose(f);
  EXPECT_EQ(std::system(("/usr/bin/promtool check metrics < " + path).c_str()), 0);

  const std::string page = StatusPage(s, 0);
  EXPECT_THAT(page, HasSubstr("replicated shards: failovers 1"));
  EXPECT_THAT(page, HasSubstr("<tr><td>0</td><td>ps:1</td><td>none</td><td>1700000000123</td><td>unreplicated</td></tr>"));
  EXPECT_THAT(page, HasSubstr("<tr><td>1</td><td>ps:1</td><td>ps:&lt;2&gt;</td><td>1700000000123</td><td>replicated</td></tr>"));
  EXPECT_EQ(StatusPage(Sample(), 0).find("replicated shards"), std::string::npos);
  EXPECT_EQ(PrometheusMetrics(Sample(), 0).find("psrt_replica"), std::string::npos);
}

TEST(HttpStatusTest, WithATokenEveryPageRequiresIt) {
  HttpStatusServer http([] { return Sample(); }, 5000);
  ASSERT_TRUE(http.Start("127.0.0.1", 0, "0123456789abcdef0123").ok());
  httplib::Client client("127.0.0.1", http.port());
  for (const char* path : {"/", "/metrics"}) {
    auto r = client.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->body.find("psrt"), std::string::npos) << "nothing of the job leaks: " << r->body;
    r = client.Get(path, {{"Authorization", "Bearer 0123456789abcdef0124"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    r = client.Get(path, {{"Authorization", "Bearer 0123456789abcdef0123"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_THAT(r->body, HasSubstr("1234")) << path;
  }
  auto r = client.Get("/other", {{"Authorization", "Bearer 0123456789abcdef0123"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

}  // namespace
}  // namespace psrt
