// What a parameter server counts for its /metrics page: pulls and pushes
// by method (calls, failures, bytes, latency as the PS sees it: from the
// request's arrival to its answer, a parked SYNC pull's wait included),
// the optimizer apply time of each push, and the page itself, rendered
// from those and the core's status.
//
//   auto metrics = std::make_shared<PsMetrics>();
//   service.set_metrics(metrics);                        // before serving
//   ... ServeMetrics(flags, [&] { return PsMetricsText(*metrics, core.Status(),
//                                                      router.Roles(), {{"task", "ps:0"}}); }, ...);
//
// Thread-safe: the service's threads record, the HTTP thread renders.
#ifndef PSRT_COMMON_STORE_PS_METRICS_H_
#define PSRT_COMMON_STORE_PS_METRICS_H_

#include <string>
#include <vector>

#include "common/metrics/prometheus_text.h"
#include "common/store/replica_router.h"
#include "common/transport/ps_frame.h"
#include "proto/ps_service.pb.h"

namespace psrt {

struct PsMetrics {
  // Bytes: a pull's answer (sent), a push's request (received).
  CallStats pull, pull_rows, push, push_rows;
  // Pushes a primary forwarded here, this PS being their store's backup.
  CallStats replicate;
  // The optimizer's apply of one push (or PushRows), on any store.
  LatencyHistogram apply;

  // The stats of a data call: `replica` for a backup's forwarded push.
  CallStats* For(psframe::Method method, bool replica);
};

// The /metrics text: the PS's global step, variables and their bytes, each
// method's calls, failures, bytes and latency, the apply time, the process's
// resident memory, and the role of each store it holds (replicated shards:
// primary or backup). Every sample carries `task` (e.g. {{"task", "ps:0"}}).
std::string PsMetricsText(const PsMetrics& m, const PsStatusResponse& status,
                          const std::vector<ReplicaRouter::StoreRole>& roles, const MetricLabels& task);

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PS_METRICS_H_
