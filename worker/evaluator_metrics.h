// The evaluator's /metrics: its latest evaluation in Prometheus' text
// format, served on its own port (common/http: bounded requests, GET and
// HEAD only, slow clients hold up nobody).
//
//   psrt_evaluator_step                       the checkpoint step last evaluated
//   psrt_evaluator_metric{name="accuracy"}    each metric of that evaluation
//   psrt_evaluator_evaluated_total            checkpoints evaluated
//   psrt_evaluator_skipped_total              superseded before their turn
//   psrt_evaluator_failed_total               unreadable or failed, skipped
//   psrt_evaluator_eval_seconds               how long the last one took
//   psrt_evaluator_job_finished               1 once the chief's job is over
#ifndef PSRT_WORKER_EVALUATOR_METRICS_H_
#define PSRT_WORKER_EVALUATOR_METRICS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http/http_server.h"
#include "worker/checkpoint_evaluator.h"

namespace psrt {

// The metrics text of `status` (exposed for tests).
std::string EvaluatorMetricsText(const EvaluatorStatus& status);

// Serves /metrics (and a pointer to it at /) from `status`, which the
// server's thread calls per request. Plain HTTP; bind loopback unless the
// numbers may be seen by anyone who can reach the port.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeEvaluatorMetrics(const std::string& host, int port,
                                                                  std::function<EvaluatorStatus()> status);

}  // namespace psrt

#endif  // PSRT_WORKER_EVALUATOR_METRICS_H_
