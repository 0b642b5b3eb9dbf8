#include "common/metrics/prometheus_text.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(PrometheusText, LabelValuesAreEscaped) {
  EXPECT_EQ(RenderLabels({}), "");
  EXPECT_EQ(RenderLabels({{"task", "ps:0"}, {"why", "a\"b\\c\nd"}}), "{task=\"ps:0\",why=\"a\\\"b\\\\c\\nd\"}");
}

TEST(PrometheusText, FamilyAndSample) {
  std::string out;
  AppendOne(&out, "psrt_x", "gauge", "An x.", {{"task", "worker:1"}}, 2.5);
  EXPECT_EQ(out, "# HELP psrt_x An x.\n# TYPE psrt_x gauge\npsrt_x{task=\"worker:1\"} 2.5\n");
}

TEST(PrometheusText, HistogramIsCumulativeWithSumAndCount) {
  LatencyHistogram h;
  h.Observe(absl::Microseconds(300));  // <= 0.0005
  h.Observe(absl::Milliseconds(20));   // <= 0.025
  h.Observe(absl::Seconds(30));        // above every bound
  std::string out;
  h.AppendSamples(&out, "psrt_t_seconds", {{"task", "ps:0"}});
  EXPECT_NE(out.find("psrt_t_seconds_bucket{task=\"ps:0\",le=\"0.0005\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("psrt_t_seconds_bucket{task=\"ps:0\",le=\"0.01\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("psrt_t_seconds_bucket{task=\"ps:0\",le=\"0.025\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("psrt_t_seconds_bucket{task=\"ps:0\",le=\"10\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("psrt_t_seconds_bucket{task=\"ps:0\",le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("psrt_t_seconds_count{task=\"ps:0\"} 3\n"), std::string::npos) << out;
  EXPECT_NEAR(h.sum_seconds(), 30.0203, 1e-9);
}

TEST(PrometheusText, ResidentMemoryIsRead) {
  EXPECT_GT(ProcessResidentBytes(), 1 << 20);
}

}  // namespace
}  // namespace psrt
