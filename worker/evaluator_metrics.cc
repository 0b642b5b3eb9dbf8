#include "worker/evaluator_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/metrics/prometheus_text.h"

namespace psrt {
namespace {

void Metric(std::string* out, const std::string& name, const char* type, const std::string& help,
            double value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  absl::StrFormat("%.9g", value), "\n");
}

}  // namespace

std::string EvaluatorMetricsText(const EvaluatorStatus& s) {
  std::string out;
  Metric(&out, "psrt_evaluator_step", "gauge", "The checkpoint step last evaluated (-1: none yet).", s.step);
  absl::StrAppend(&out,
                  "# HELP psrt_evaluator_metric Each test metric of the last evaluated checkpoint.\n"
                  "# TYPE psrt_evaluator_metric gauge\n");
  for (const auto& [name, value] : s.metrics) {
    absl::StrAppend(&out, "psrt_evaluator_metric{name=\"", PrometheusLabelValue(name), "\"} ",
                    absl::StrFormat("%.9g", value), "\n");
  }
  Metric(&out, "psrt_evaluator_evaluated_total", "counter", "Checkpoints evaluated.", s.evaluated);
  Metric(&out, "psrt_evaluator_skipped_total", "counter",
         "Committed checkpoints superseded by a newer one before their turn.", s.skipped);
  Metric(&out, "psrt_evaluator_failed_total", "counter", "Checkpoints that could not be read or evaluated.",
         s.failed);
  Metric(&out, "psrt_evaluator_eval_seconds", "gauge", "Seconds the last evaluation took.", s.seconds);
  Metric(&out, "psrt_evaluator_job_finished", "gauge", "1 once the chief's job is over.", s.job_finished ? 1 : 0);
  return out;
}

absl::StatusOr<std::unique_ptr<HttpServer>> ServeEvaluatorMetrics(const std::string& host, int port,
                                                                  std::function<EvaluatorStatus()> status) {
  return HttpServer::Start(
      host, port,
      [status = std::move(status)](const HttpRequest& req) {
        HttpResponse res;
        if (req.path == "/metrics") {
          res.content_type = "text/plain; version=0.0.4";
          res.body = EvaluatorMetricsText(status());
        } else if (req.path == "/") {
          res.body = "psrt evaluator: /metrics\n";
        } else {
          res.status = 404;
          res.body = "not found: / and /metrics only\n";
        }
        return res;
      },
      HttpServerOptions());
}

}  // namespace psrt
