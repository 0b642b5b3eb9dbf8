// What a worker counts for its /metrics page, gathered by two decorators
// around what the step loop already calls, so that WorkerRuntime stays as
// it is: a ParameterClient that times and sizes every pull and push, and a
// StepRunner that times every step's compute and keeps its loss and
// metrics (training accuracy).
//
//   auto metrics = std::make_shared<WorkerMetrics>();
//   deps.make_client = [&](const WorkerAssignment& a) {
//     ... return MeterClient(std::move(client), metrics);
//   };
//   deps.make_runner = ... MeterRunner(std::move(runner), metrics);
//   ... WorkerMetricsText(*metrics, runtime.Status(), {{"task", "worker:0"}})
//
// Thread-safe: the loop and its prefetch and push threads record, the HTTP
// thread renders.
#ifndef PSRT_WORKER_WORKER_METRICS_H_
#define PSRT_WORKER_WORKER_METRICS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/compute/step_runner.h"
#include "common/metrics/prometheus_text.h"
#include "common/transport/parameter_client.h"
#include "proto/worker_service.pb.h"

namespace psrt {

struct WorkerMetrics {
  // Bytes of tensors: pulled (answers), pushed (gradients, ids and rows).
  // Latency as the worker waits: a SYNC pull's wait for its step included;
  // a bucketed push's from its last part's send to every part's answer.
  CallStats pull, pull_rows, push;
  // Forward and backward of one step (a bucketed push's sends included).
  LatencyHistogram compute;

  absl::Mutex mu;
  // What the running assignment makes this worker (RecordAssignment):
  // "parameter_server" (pulls and pushes go to PS tasks), "collective" (a
  // replica of a multi_worker_mirrored group: a push is the all-reduce),
  // "hybrid" (a replica whose embedding tables are on PS tasks); its rank
  // and the group's size (-1 and 0 outside a group); local device replicas.
  std::string strategy ABSL_GUARDED_BY(mu);
  int collective_rank ABSL_GUARDED_BY(mu) = -1;
  int collective_size ABSL_GUARDED_BY(mu) = 0;
  int local_devices ABSL_GUARDED_BY(mu) = 1;
  // The last computed step's metrics, by name (accuracy, ...), and loss.
  std::map<std::string, float> last_metrics ABSL_GUARDED_BY(mu);
  float last_loss ABSL_GUARDED_BY(mu) = 0;
};

// `client` with every pull and push recorded in `metrics`.
std::unique_ptr<ParameterClient> MeterClient(std::unique_ptr<ParameterClient> client,
                                             std::shared_ptr<WorkerMetrics> metrics);
// `runner` with every step's compute, loss and metrics recorded.
std::unique_ptr<StepRunner> MeterRunner(std::unique_ptr<StepRunner> runner, std::shared_ptr<WorkerMetrics> metrics);

// Records what `a` makes this worker (WorkerMetrics::strategy and the rest),
// at each assignment it starts.
void RecordAssignment(WorkerMetrics& m, const WorkerAssignment& a);

// The /metrics text: the worker's step and state, loss, each training
// metric of its last step, pulls and pushes (calls, failures, bytes,
// latency; a collective replica's push is its all-reduce), its role (the
// assignment's strategy, collective rank and size, local devices), compute
// time and the process's resident memory. Every sample
// carries `task`.
std::string WorkerMetricsText(WorkerMetrics& m, const WorkerStatusResponse& status, const MetricLabels& task);

}  // namespace psrt

#endif  // PSRT_WORKER_WORKER_METRICS_H_
