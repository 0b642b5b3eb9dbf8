#include "common/store/ps_metrics.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(PsMetrics, CallsByMethodAndEachStoresRole) {
  PsMetrics m;
  m.For(psframe::Method::kPush, /*replica=*/false)->Record(true, 100, absl::Milliseconds(2));
  m.For(psframe::Method::kPush, /*replica=*/true)->Record(false, 100, absl::Milliseconds(2));
  m.For(psframe::Method::kPullRows, false)->Record(true, 64, absl::Milliseconds(1));
  m.apply.Observe(absl::Milliseconds(1));
  PsStatusResponse s;
  s.set_global_step(42);
  s.set_epoch(3);
  // A PS that serves its own store 1 and keeps the backup of store 0.
  const std::string text = PsMetricsText(m, s, {{0, true}, {1, false}}, {{"task", "ps:1"}});
  for (const char* line : {"psrt_ps_step{task=\"ps:1\"} 42\n",
                           "psrt_ps_requests_total{task=\"ps:1\",method=\"push\"} 1\n",
                           "psrt_ps_requests_total{task=\"ps:1\",method=\"replicate\"} 1\n",
                           "psrt_ps_request_errors_total{task=\"ps:1\",method=\"replicate\"} 1\n",
                           "psrt_ps_request_bytes_total{task=\"ps:1\",method=\"pull_rows\"} 64\n",
                           "psrt_ps_apply_seconds_count{task=\"ps:1\"} 1\n",
                           "psrt_ps_store_role{task=\"ps:1\",store=\"0\",role=\"backup\"} 1\n",
                           "psrt_ps_store_role{task=\"ps:1\",store=\"0\",role=\"primary\"} 0\n",
                           "psrt_ps_store_role{task=\"ps:1\",store=\"1\",role=\"primary\"} 1\n",
                           "psrt_ps_placement_epoch{task=\"ps:1\"} 3\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace
}  // namespace psrt
