#include "common/store/ps_metrics.h"

#include "absl/strings/str_cat.h"

namespace psrt {

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
  AppendCallStats(&out, "psrt_ps",
                  {"Data calls answered, by method (replicate: pushes a primary forwarded to this backup).",
                   "Data calls answered with an error, by method.",
                   "Bytes of tensors by method: pull answers sent, push requests received.",
                   "From a data call's arrival to its answer (a SYNC pull's wait for its step included)."},
                  task,
                  {{"pull", &m.pull}, {"pull_rows", &m.pull_rows}, {"push", &m.push}, {"push_rows", &m.push_rows},
                   {"replicate", &m.replicate}});
  AppendFamily(&out, "psrt_ps_apply_seconds", "histogram", "The optimizer's apply of one push.");
  m.apply.AppendSamples(&out, "psrt_ps_apply_seconds", task);
  AppendOne(&out, "process_resident_memory_bytes", "gauge", "Resident memory of this process.", task,
            static_cast<double>(ProcessResidentBytes()));
  AppendFamily(&out, "psrt_ps_store_role", "gauge",
               "Each store of variables this PS holds (1 for its current role): its own store, and under "
               "job.replication the backups it keeps and the stores it was promoted to serve.");
  for (const ReplicaRouter::StoreRole& r : roles) {
    MetricLabels l = WithLabel(task, "store", absl::StrCat(r.store));
    AppendSample(&out, "psrt_ps_store_role", WithLabel(l, "role", "primary"), r.backup ? 0 : 1);
    AppendSample(&out, "psrt_ps_store_role", WithLabel(l, "role", "backup"), r.backup ? 1 : 0);
  }
  AppendOne(&out, "psrt_ps_placement_epoch", "gauge", "The replication placement epoch (0: not replicating).", task,
            s.epoch());
  AppendOne(&out, "psrt_ps_stale_refused_total", "counter",
            "Calls refused for carrying another generation or placement epoch.", task,
            s.stale_generation_refused() + s.stale_epoch_refused());
  return out;
}

}  // namespace psrt
