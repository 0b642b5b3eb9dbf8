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
  TaskInfo* t = s.add_task();
  t->mutable_task()->set_job("ps");
  t->set_address("127.0.0.1:1");
  t->set_incarnation(5);
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
  EXPECT_THAT(metrics->body, HasSubstr("psrt_job_state{state=\"RECOVERING\"} 1\n"));
  EXPECT_THAT(metrics->body, HasSubstr("psrt_task_registered{task=\"ps:0\"} 1\n"));

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
  http.Stop();
}

}  // namespace
}  // namespace psrt
