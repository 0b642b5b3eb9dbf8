#include "common/metrics/prometheus_text.h"

#include <unistd.h>

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psrt {

MetricLabels WithLabel(MetricLabels labels, const std::string& name, const std::string& value) {
  labels.emplace_back(name, value);
  return labels;
}

std::string PrometheusLabelValue(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

std::string RenderLabels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? "," : "", labels[i].first, "=\"", PrometheusLabelValue(labels[i].second), "\"");
  }
  out += "}";
  return out;
}

void AppendFamily(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

namespace {
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}
}  // namespace

void AppendSample(std::string* out, absl::string_view name, const MetricLabels& labels, double value) {
  absl::StrAppend(out, name, RenderLabels(labels), " ", Number(value), "\n");
}

void AppendOne(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help,
               const MetricLabels& labels, double value) {
  AppendFamily(out, name, type, help);
  AppendSample(out, name, labels, value);
}

void LatencyHistogram::Observe(absl::Duration d) {
  const double s = absl::ToDoubleSeconds(d);
  size_t i = 0;
  while (i < kBoundsSeconds.size() && s > kBoundsSeconds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(absl::ToInt64Microseconds(d), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void LatencyHistogram::AppendSamples(std::string* out, absl::string_view name, const MetricLabels& labels) const {
  const std::string bucket = absl::StrCat(name, "_bucket");
  int64_t cumulative = 0;
  MetricLabels with_le = labels;
  with_le.emplace_back("le", "");
  for (size_t i = 0; i <= kBoundsSeconds.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    with_le.back().second = i < kBoundsSeconds.size() ? absl::StrFormat("%g", kBoundsSeconds[i]) : "+Inf";
    AppendSample(out, bucket, with_le, static_cast<double>(cumulative));
  }
  // The +Inf bucket is the count by definition: the same figure, so that a
  // render during an Observe stays consistent.
  AppendSample(out, absl::StrCat(name, "_sum"), labels, sum_seconds());
  AppendSample(out, absl::StrCat(name, "_count"), labels, static_cast<double>(cumulative));
}

void CallStats::Record(bool ok, int64_t bytes_moved, absl::Duration took) {
  calls.fetch_add(1, std::memory_order_relaxed);
  if (!ok) errors.fetch_add(1, std::memory_order_relaxed);
  bytes.fetch_add(bytes_moved, std::memory_order_relaxed);
  seconds.Observe(took);
}

void AppendCallStats(std::string* out, absl::string_view prefix, const CallStatsHelp& help, const MetricLabels& labels,
                     const std::vector<std::pair<std::string, const CallStats*>>& by_method) {
  auto with_method = [&labels](const std::string& method) { return WithLabel(labels, "method", method); };
  const std::string calls = absl::StrCat(prefix, "_requests_total"), errors = absl::StrCat(prefix, "_request_errors_total"),
                    bytes = absl::StrCat(prefix, "_request_bytes_total"), seconds = absl::StrCat(prefix, "_request_seconds");
  AppendFamily(out, calls, "counter", help.calls);
  for (const auto& [m, c] : by_method) AppendSample(out, calls, with_method(m), c->calls.load());
  AppendFamily(out, errors, "counter", help.errors);
  for (const auto& [m, c] : by_method) AppendSample(out, errors, with_method(m), c->errors.load());
  AppendFamily(out, bytes, "counter", help.bytes);
  for (const auto& [m, c] : by_method) AppendSample(out, bytes, with_method(m), c->bytes.load());
  AppendFamily(out, seconds, "histogram", help.seconds);
  for (const auto& [m, c] : by_method) c->seconds.AppendSamples(out, seconds, with_method(m));
}

int64_t ProcessResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return -1;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace psrt
