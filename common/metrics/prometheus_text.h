// Prometheus' text exposition format (version 0.0.4), written by hand: the
// families a daemon's /metrics page is made of, a lock-free latency
// histogram, and the process's resident memory.
//
// A family is a header (HELP, TYPE) and then one sample per label set:
//
//   std::string out;
//   MetricLabels task = {{"task", "ps:0"}};
//   AppendFamily(&out, "psrt_ps_step", "gauge", "The PS's global step.");
//   AppendSample(&out, "psrt_ps_step", task, 42);
//   LatencyHistogram pulls;         // shared with the threads that serve
//   pulls.Observe(absl::Milliseconds(3));
//   AppendFamily(&out, "psrt_ps_request_seconds", "histogram", "...");
//   pulls.AppendSamples(&out, "psrt_ps_request_seconds", {{"task", "ps:0"}, {"method", "pull"}});
//
// Label values are escaped here (backslash, quote, newline), so a value a
// peer or a user chose cannot break the page. Thread-safe: LatencyHistogram
// may be observed and rendered from any threads at once.
#ifndef PSRT_COMMON_METRICS_PROMETHEUS_TEXT_H_
#define PSRT_COMMON_METRICS_PROMETHEUS_TEXT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace psrt {

// name -> value, in the order given. Names must be valid Prometheus label
// names (ours are literals); values are escaped when rendered.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// `labels` and name="value".
MetricLabels WithLabel(MetricLabels labels, const std::string& name, const std::string& value);
// `v` escaped for a label value: backslash, double quote and newline.
std::string PrometheusLabelValue(absl::string_view v);
// {a="x",b="y"}, or "" for no labels.
std::string RenderLabels(const MetricLabels& labels);

// "# HELP name help\n# TYPE name type\n". `type`: gauge, counter, histogram.
void AppendFamily(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help);
// "name{labels} value\n" (value with up to 17 significant digits).
void AppendSample(std::string* out, absl::string_view name, const MetricLabels& labels, double value);
// A family with one sample: its header and the sample.
void AppendOne(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help,
               const MetricLabels& labels, double value);

// Durations in fixed buckets (0.5 ms to 10 s, and +Inf), counted with
// relaxed atomics: Observe never blocks, so the data path can afford it. A
// render may see a count one ahead of the sum (or the other way round) while
// an observation is under way; Prometheus tolerates that.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBoundsSeconds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                            0.1,    0.25,  0.5,    1,     2.5,   5,    10};
  void Observe(absl::Duration d);
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum_seconds() const { return sum_us_.load(std::memory_order_relaxed) / 1e6; }
  // name_bucket{labels,le="..."} (cumulative), name_sum{labels}, name_count{labels}.
  void AppendSamples(std::string* out, absl::string_view name, const MetricLabels& labels) const;

 private:
  std::array<std::atomic<int64_t>, kBoundsSeconds.size() + 1> buckets_{};  // last: above every bound
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> sum_us_{0};
};

// A counter of events and of the bytes they carried, with their latency.
// What both daemons keep for each kind of push and pull.
struct CallStats {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> bytes{0};
  LatencyHistogram seconds;
  void Record(bool ok, int64_t bytes_moved, absl::Duration took);
};

// What the four families of AppendCallStats say of themselves.
struct CallStatsHelp {
  absl::string_view calls, errors, bytes, seconds;
};
// PREFIX_requests_total, PREFIX_request_errors_total,
// PREFIX_request_bytes_total (counters) and PREFIX_request_seconds (a
// histogram), one sample each per entry of `by_method`, labelled with
// `labels` and method="NAME".
void AppendCallStats(std::string* out, absl::string_view prefix, const CallStatsHelp& help, const MetricLabels& labels,
                     const std::vector<std::pair<std::string, const CallStats*>>& by_method);

// This process's resident set size in bytes (/proc/self/statm), or -1
// where it cannot be read.
int64_t ProcessResidentBytes();

}  // namespace psrt

#endif  // PSRT_COMMON_METRICS_PROMETHEUS_TEXT_H_
