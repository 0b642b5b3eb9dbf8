#include "common/store/ps_metrics.h"

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

MetricLabels With(const MetricLabels& base, const std::string& name, const std::string& value) {
  MetricLabels l = base;
  l.emplace_back(name, value);
  return l;
}

}  // namespace

CallStats* PsMetrics::For(psframe::Method method, bool replica) {
  switch (method) {
    case psframe::Method::kPull:
      return &pull;
    case psframe::Method::kPullRows:
      return &pull_rows;
    case psframe::Method::kPush:
      return replica ? &replicate : &push;
    case psframe::Method::kPushRows:
      return &push_rows;
  }
  return &push;
}

std::string PsMetricsText(const PsMetrics& m, const PsStatusResponse& s,
                          const std::vector<ReplicaRouter::StoreRole>& roles, const MetricLabels& task) {
  std::string out;
  AppendOne(&out, "psrt_ps_step", "gauge", "The PS's global step (pushes applied, or SYNC steps).", task,
            s.global_step());
  AppendOne(&out, "psrt_ps_variables", "gauge", "Variables (and partitions) this PS holds.", task, s.variables());
  AppendOne(&out, "psrt_ps_variable_bytes", "gauge", "Bytes of variables and optimizer slots this PS holds.", task,
            s.bytes());
  AppendOne(&out, "psrt_ps_generation", "gauge", "The generation (restores) this PS serves.", task, s.generation());
  const std::pair<const char*, const CallStats*> methods[] = {
      {"pull", &m.pull}, {"pull_rows", &m.pull_rows}, {"push", &m.push}, {"push_rows", &m.push_rows},
      {"replicate", &m.replicate}};
  AppendFamily(&out, "psrt_ps_requests_total", "counter",
               "Data calls answered, by method (replicate: pushes a primary forwarded to this backup).");
  for (const auto& [name, c] : methods) AppendSample(&out, "psrt_ps_requests_total", With(task, "method", name), c->calls);
  AppendFamily(&out, "psrt_ps_request_errors_total", "counter", "Data calls answered with an error, by method.");
  for (const auto& [name, c] : methods) {
    AppendSample(&out, "psrt_ps_request_errors_total", With(task, "method", name), c->errors);
  }
  AppendFamily(&out, "psrt_ps_request_bytes_total", "counter",
               "Bytes of tensors by method: pull answers sent, push requests received.");
  for (const auto& [name, c] : methods) {
    AppendSample(&out, "psrt_ps_request_bytes_total", With(task, "method", name), c->bytes);
  }
  AppendFamily(&out, "psrt_ps_request_seconds", "histogram",
               "From a data call's arrival to its answer (a SYNC pull's wait for its step included).");
  for (const auto& [name, c] : methods) c->seconds.AppendSamples(&out, "psrt_ps_request_seconds", With(task, "method", name));
  AppendFamily(&out, "psrt_ps_apply_seconds", "histogram", "The optimizer's apply of one push.");
  m.apply.AppendSamples(&out, "psrt_ps_apply_seconds", task);
  AppendOne(&out, "process_resident_memory_bytes", "gauge", "Resident memory of this process.", task,
            static_cast<double>(ProcessResidentBytes()));
  AppendFamily(&out, "psrt_ps_store_role", "gauge",
               "Each store of variables this PS holds (1 for its current role): its own store, and under "
               "job.replication the backups it keeps and the stores it was promoted to serve.");
  for (const ReplicaRouter::StoreRole& r : roles) {
    MetricLabels l = With(task, "store", absl::StrCat(r.store));
    AppendSample(&out, "psrt_ps_store_role", With(l, "role", "primary"), r.backup ? 0 : 1);
    AppendSample(&out, "psrt_ps_store_role", With(l, "role", "backup"), r.backup ? 1 : 0);
  }
  AppendOne(&out, "psrt_ps_placement_epoch", "gauge", "The replication placement epoch (0: not replicating).", task,
            s.epoch());
  AppendOne(&out, "psrt_ps_stale_refused_total", "counter",
            "Calls refused for carrying another generation or placement epoch.", task,
            s.stale_generation_refused() + s.stale_epoch_refused());
  return out;
}

}  // namespace psrt
