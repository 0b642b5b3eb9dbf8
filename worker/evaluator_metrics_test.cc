#include "worker/evaluator_metrics.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"
#include "httplib.h"

namespace psrt {
namespace {

EvaluatorStatus Sample() {
  EvaluatorStatus s;
  s.step = 2500;
  s.metrics = {{"accuracy", 0.875f}, {"loss", 0.25f}, {"we\"ird\\name\n", 1.0f}};
  s.evaluated = 5;
  s.skipped = 2;
  s.failed = 1;
  s.seconds = 0.5;
  return s;
}

TEST(EvaluatorMetricsTest, TextNamesEveryNumberAndEscapesLabels) {
  std::string text = EvaluatorMetricsText(Sample());
  for (const char* line : {"psrt_evaluator_step 2500\n", "psrt_evaluator_metric{name=\"accuracy\"} 0.875\n",
                           "psrt_evaluator_metric{name=\"loss\"} 0.25\n",
                           "psrt_evaluator_metric{name=\"we\\\"ird\\\\name\\n\"} 1\n",
                           "psrt_evaluator_evaluated_total 5\n", "psrt_evaluator_skipped_total 2\n",
                           "psrt_evaluator_failed_total 1\n", "psrt_evaluator_eval_seconds 0.5\n",
                           "psrt_evaluator_job_finished 0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
  // Prometheus' own linter, where Debian's promtool is installed.
  if (std::system("test -x /usr/bin/promtool") == 0) {
    std::string path = ::testing::TempDir() + "/metrics.txt";
    std::ofstream(path) << text;
    EXPECT_EQ(std::system(("/usr/bin/promtool check metrics < " + path).c_str()), 0) << text;
  }
}

TEST(EvaluatorMetricsTest, ServesMetricsAndNothingElse) {
  auto server = ServeEvaluatorMetrics("127.0.0.1", 0, [] { return Sample(); });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client http("127.0.0.1", (*server)->port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->body, EvaluatorMetricsText(Sample()));
  auto other = http.Get("/secrets");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
}

}  // namespace
}  // namespace psrt
