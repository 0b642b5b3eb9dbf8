#include "worker/worker_metrics.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace psrt {
namespace {

int64_t Bytes(const TensorMap& tensors) {
  int64_t n = 0;
  for (const auto& [name, t] : tensors) n += static_cast<int64_t>(t.TotalBytes());
  return n;
}

int64_t Bytes(const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) {
  int64_t n = 0;
  for (const auto& [name, rows] : sparse) n += static_cast<int64_t>(rows.first.TotalBytes() + rows.second.TotalBytes());
  return n;
}

class MeteredBucketedPush : public BucketedPush {
 public:
  MeteredBucketedPush(std::unique_ptr<BucketedPush> inner, std::shared_ptr<WorkerMetrics> m)
      : inner_(std::move(inner)), m_(std::move(m)) {}
  void Add(const std::string& variable, const Tensor& gradient) override {
    bytes_ += static_cast<int64_t>(gradient.TotalBytes());
    inner_->Add(variable, gradient);
  }
  absl::Status Finish(const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) override {
    const absl::Time start = absl::Now();
    absl::Status s = inner_->Finish(sparse);
    m_->push.Record(s.ok(), bytes_ + Bytes(sparse), absl::Now() - start);
    return s;
  }

 private:
  const std::unique_ptr<BucketedPush> inner_;
  const std::shared_ptr<WorkerMetrics> m_;
  int64_t bytes_ = 0;  // one thread uses a bucketed push
};

class MeteredClient : public ParameterClient {
 public:
  MeteredClient(std::unique_ptr<ParameterClient> inner, std::shared_ptr<WorkerMetrics> m)
      : inner_(std::move(inner)), m_(std::move(m)) {}

  absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& variables, int64_t step) override {
    const absl::Time start = absl::Now();
    absl::StatusOr<TensorMap> r = inner_->Pull(variables, step);
    m_->pull.Record(r.ok(), r.ok() ? Bytes(*r) : 0, absl::Now() - start);
    return r;
  }
  absl::StatusOr<TensorMap> PullRows(const RowRequest& rows, int64_t step) override {
    const absl::Time start = absl::Now();
    absl::StatusOr<TensorMap> r = inner_->PullRows(rows, step);
    m_->pull_rows.Record(r.ok(), r.ok() ? Bytes(*r) : 0, absl::Now() - start);
    return r;
  }
  absl::Status Push(const RequestId& id, const TensorMap& dense,
                    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) override {
    const absl::Time start = absl::Now();
    absl::Status s = inner_->Push(id, dense, sparse);
    m_->push.Record(s.ok(), Bytes(dense) + Bytes(sparse), absl::Now() - start);
    return s;
  }
  std::unique_ptr<BucketedPush> StartBucketedPush(const RequestId& id, size_t bucket_bytes) override {
    std::unique_ptr<BucketedPush> inner = inner_->StartBucketedPush(id, bucket_bytes);
    if (inner == nullptr) return nullptr;
    return std::make_unique<MeteredBucketedPush>(std::move(inner), m_);
  }
  void SetGeneration(int64_t generation) override { inner_->SetGeneration(generation); }
  void SetRoute(const ReplicaRoute& route) override { inner_->SetRoute(route); }
  void Abandon(const std::vector<int>& ps_tasks) override { inner_->Abandon(ps_tasks); }
  bool lockstep() const override { return inner_->lockstep(); }
  absl::StatusOr<bool> PushAgreeing(const RequestId& id, const TensorMap& dense,
                                    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse,
                                    bool pause) override {
    const absl::Time start = absl::Now();
    absl::StatusOr<bool> r = inner_->PushAgreeing(id, dense, sparse, pause);
    m_->push.Record(r.ok(), Bytes(dense) + Bytes(sparse), absl::Now() - start);
    return r;
  }

 private:
  const std::unique_ptr<ParameterClient> inner_;
  const std::shared_ptr<WorkerMetrics> m_;
};

class MeteredRunner : public StepRunner {
 public:
  MeteredRunner(std::unique_ptr<StepRunner> inner, std::shared_ptr<WorkerMetrics> m)
      : inner_(std::move(inner)), m_(std::move(m)) {}
  std::vector<std::string> DenseVariables() const override { return inner_->DenseVariables(); }
  absl::StatusOr<RowRequest> SparseRows(const Batch& batch) const override { return inner_->SparseRows(batch); }
  absl::StatusOr<StepResult> Run(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                 int64_t step) override {
    const absl::Time start = absl::Now();
    absl::StatusOr<StepResult> r = inner_->Run(dense, rows, batch, step);
    Record(r, absl::Now() - start);
    return r;
  }
  absl::StatusOr<StepResult> RunStreaming(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                          int64_t step, const GradientReady& ready) override {
    const absl::Time start = absl::Now();
    absl::StatusOr<StepResult> r = inner_->RunStreaming(dense, rows, batch, step, ready);
    Record(r, absl::Now() - start);
    return r;
  }
  std::string device() const override { return inner_->device(); }

 private:
  void Record(const absl::StatusOr<StepResult>& r, absl::Duration took) {
    if (!r.ok()) return;
    m_->compute.Observe(took);
    absl::MutexLock lock(&m_->mu);
    m_->last_loss = r->loss;
    for (const auto& [name, value] : r->metrics) m_->last_metrics[name] = value;
  }
  const std::unique_ptr<StepRunner> inner_;
  const std::shared_ptr<WorkerMetrics> m_;
};

}  // namespace

std::unique_ptr<ParameterClient> MeterClient(std::unique_ptr<ParameterClient> client,
                                             std::shared_ptr<WorkerMetrics> metrics) {
  return std::make_unique<MeteredClient>(std::move(client), std::move(metrics));
}

std::unique_ptr<StepRunner> MeterRunner(std::unique_ptr<StepRunner> runner, std::shared_ptr<WorkerMetrics> metrics) {
  return std::make_unique<MeteredRunner>(std::move(runner), std::move(metrics));
}

void RecordAssignment(WorkerMetrics& m, const WorkerAssignment& a) {
  // A replica's store index is num_ps: variables placed below it are on PS tasks.
  bool on_ps = false;
  if (a.has_collective()) {
    for (const VariablePlacement& vp : a.placement().variable()) {
      on_ps = on_ps || (vp.shard_size() > 0 && vp.shard(0).ps_task() < a.ps_size());
    }
  }
  absl::MutexLock lock(&m.mu);
  m.strategy = !a.has_collective() ? "parameter_server" : on_ps ? "hybrid" : "collective";
  m.collective_rank = a.has_collective() ? a.collective().rank() : -1;
  m.collective_size = a.has_collective() ? a.collective().size() : 0;
  m.local_devices = std::max(1, a.local_devices());
}

std::string WorkerMetricsText(WorkerMetrics& m, const WorkerStatusResponse& s, const MetricLabels& task) {
  std::string out;
  AppendOne(&out, "psrt_worker_step", "gauge", "The next step this worker runs.", task, s.step());
  AppendFamily(&out, "psrt_worker_state", "gauge", "The worker's state (1 for the current one).");
  for (int i = WorkerStatusResponse::State_MIN; i <= WorkerStatusResponse::State_MAX; ++i) {
    AppendSample(&out, "psrt_worker_state",
                 WithLabel(task, "state", WorkerStatusResponse::State_Name(static_cast<WorkerStatusResponse::State>(i))),
                 s.state() == i ? 1 : 0);
  }
  AppendOne(&out, "psrt_worker_generation", "gauge", "The generation (restores) of the assignment it runs.", task,
            s.generation());
  AppendOne(&out, "psrt_worker_examples_per_second", "gauge", "This worker's training throughput.", task,
            s.examples_per_sec());
  {
    absl::MutexLock lock(&m.mu);
    if (!m.strategy.empty()) {
      AppendOne(&out, "psrt_worker_role", "gauge",
                "1, labelled with what the assignment makes this worker: parameter_server, collective (a "
                "multi_worker_mirrored replica: its push is the all-reduce) or hybrid.",
                WithLabel(task, "strategy", m.strategy), 1);
      AppendOne(&out, "psrt_worker_collective_rank", "gauge", "Its rank in the collective group (-1: none).", task,
                m.collective_rank);
      AppendOne(&out, "psrt_worker_collective_size", "gauge", "The collective group's size (0: none).", task,
                m.collective_size);
      AppendOne(&out, "psrt_worker_local_devices", "gauge", "Device replicas in this worker (mirrored devices).",
                task, m.local_devices);
    }
    AppendOne(&out, "psrt_worker_loss", "gauge", "Training loss of the last step computed.", task, m.last_loss);
    AppendFamily(&out, "psrt_worker_train_metric", "gauge",
                 "Each training metric of the last step computed, on its batch (accuracy, ...).");
    for (const auto& [name, value] : m.last_metrics) {
      AppendSample(&out, "psrt_worker_train_metric", WithLabel(task, "name", name), value);
    }
  }
  AppendCallStats(&out, "psrt_worker",
                  {"Pulls and pushes to the parameters (every PS at once).", "Pulls and pushes that failed.",
                   "Bytes of tensors pulled and pushed.",
                   "How long the worker waited for a pull or push (a SYNC pull's wait for its step included)."},
                  task, {{"pull", &m.pull}, {"pull_rows", &m.pull_rows}, {"push", &m.push}});
  AppendFamily(&out, "psrt_worker_compute_seconds", "histogram", "Forward and backward of one step.");
  m.compute.AppendSamples(&out, "psrt_worker_compute_seconds", task);
  AppendOne(&out, "process_resident_memory_bytes", "gauge", "Resident memory of this process.", task,
            static_cast<double>(ProcessResidentBytes()));
  return out;
}

}  // namespace psrt
