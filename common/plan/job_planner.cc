#include "common/plan/job_planner.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/compute/gradient_clipping.h"
#include "common/compute/graph_step_runner.h"
#include "common/graph/model_compiler.h"
#include "common/input/dataset.h"
#include "common/input/source.h"
#include "common/optimizer.h"
#include "common/plan/early_stopping.h"
#include "common/plan/placement.h"
#include "common/plan/warm_start.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace psrt {
namespace {

class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(std::string source) : source_(std::move(source)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) error_ = absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string source_;
  std::string error_;
};

}  // namespace

absl::StatusOr<TrainingJob> ParseJob(const std::string& text, const std::string& source, const JobLimits& limits) {
  if (static_cast<int64_t>(text.size()) > limits.max_file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", text.size(), " bytes, more than the bound of ",
                                                   limits.max_file_bytes, " bytes for a job (--max_job_file_mb)"));
  }
  TrainingJob job;
  google::protobuf::TextFormat::Parser parser;
  Collector errors(source);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &job)) {
    return absl::InvalidArgumentError(errors.error().empty() ? absl::StrCat(source, ": unparsable job")
                                                             : errors.error());
  }
  // Before anything is built from the model: each layer and node costs
  // graph building, autodiff and placement.
  if (job.model().sequential().layer_size() > limits.max_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model.sequential has ", job.model().sequential().layer_size(),
                     " layers, more than the bound of ", limits.max_layers, " (--max_model_layers)"));
  }
  if (job.model().graph().node_size() > limits.max_graph_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": model.graph has ", job.model().graph().node_size(),
                                                   " nodes, more than the bound of ", limits.max_graph_nodes,
                                                   " (--max_graph_nodes)"));
  }
  if (job.input().batch_size() <= 0)
    return absl::InvalidArgumentError(absl::StrCat(source, ": input.batch_size must be positive"));
  // The workers' own bound (AssignmentLimits.max_batch_size): a job they
  // would all refuse is refused here, before anything starts.
  constexpr int kMaxBatchSize = 1 << 20;
  if (job.input().batch_size() > kMaxBatchSize) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": input.batch_size is ", job.input().batch_size(),
                                                   "; at most ", kMaxBatchSize, " examples"));
  }
  if (job.input().train().files_size() == 0)
    return absl::InvalidArgumentError(absl::StrCat(source, ": input.train lists no files"));
  if (job.checkpoint().full_every() < 0 || job.checkpoint().full_every() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": checkpoint.full_every is ", job.checkpoint().full_every(), "; want 0 (8) to 1000"));
  }
  const LossDef& loss = job.model().loss();
  if (!(loss.label_smoothing() >= 0.0f && loss.label_smoothing() < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model.loss.label_smoothing is ", loss.label_smoothing(), "; it must be in [0, 1)"));
  }
  if (loss.label_smoothing() > 0.0f && loss.kind() == LossDef::MEAN_SQUARED_ERROR) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": model.loss.label_smoothing is for the cross-entropies (SOFTMAX_CROSS_ENTROPY, "
                     "SIGMOID_CROSS_ENTROPY), not MEAN_SQUARED_ERROR"));
  }
  if (absl::Status m = CheckMetrics(job.model()); !m.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", m.message()));
  }
  absl::Status s = FillDefaultFeatures(job.mutable_input());
  if (s.ok()) s = CheckInput(job.input());
  if (s.ok() && job.has_optimizer()) {
    // The optimizer and its schedule, refused here naming the field rather
    // than by every PS once the cluster runs (the chief fills decay_steps 0
    // in from the job's length: any positive stand-in checks the rest).
    s = Optimizer::Create(ResolveSchedule(job.optimizer(), 1)).status();
    if (s.ok()) s = CheckClipping(ClippingOf(job.optimizer()), "optimizer");
  }
  if (s.ok()) s = CheckEarlyStopping(job);
  if (s.ok()) s = CheckWarmStartFields(job);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  return job;
}

absl::StatusOr<TrainingJob> LoadJob(const std::string& path, const JobLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open job file ", path));
  // The size first: a file is not read whole past the bound (a pipe or a
  // growing file is read up to one byte past it).
  std::string text(static_cast<size_t>(std::min<int64_t>(limits.max_file_bytes, 1 << 20)), '\0');
  size_t got = 0;
  while (in && static_cast<int64_t>(got) <= limits.max_file_bytes) {
    if (got == text.size()) {
      text.resize(
          std::min<size_t>(std::max<size_t>(2 * text.size(), 4096), static_cast<size_t>(limits.max_file_bytes) + 1));
    }
    in.read(&text[got], static_cast<std::streamsize>(text.size() - got));
    got += static_cast<size_t>(in.gcount());
  }
  text.resize(got);
  if (static_cast<int64_t>(got) > limits.max_file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": more than the bound of ", limits.max_file_bytes,
                                                   " bytes for a job file (--max_job_file_mb)"));
  }
  absl::StatusOr<TrainingJob> job = ParseJob(text, path, limits);
  // A model file named relative to the job is found beside it, wherever
  // the daemon runs from.
  const size_t slash = path.rfind('/');
  if (job.ok() && job->model().has_onnx() && slash != std::string::npos) {
    OnnxModel* onnx = job->mutable_model()->mutable_onnx();
    if (!onnx->path().empty() && onnx->path()[0] != '/') onnx->set_path(path.substr(0, slash + 1) + onnx->path());
  }
  // So is a warm start's source checkpoint.
  if (job.ok() && job->has_warm_start() && slash != std::string::npos) {
    WarmStartDef* warm = job->mutable_warm_start();
    const std::string& from = warm->ckpt_to_initialize_from();
    if (!from.empty() && from[0] != '/') warm->set_ckpt_to_initialize_from(path.substr(0, slash + 1) + from);
  }
  return job;
}

bool IsMirrored(const TrainingJob& job) {
  const StrategyDef& s = job.strategy();
  return s.has_multi_worker_mirrored() || s.has_mirrored() || s.has_central_storage();
}

bool IsHybrid(const TrainingJob& job) { return job.strategy().has_hybrid(); }
bool IsCollective(const TrainingJob& job) { return IsMirrored(job) || IsHybrid(job); }
int CollectiveTimeoutMs(const TrainingJob& job) {
  return IsHybrid(job) ? job.strategy().hybrid().collective_timeout_ms()
                       : job.strategy().multi_worker_mirrored().collective_timeout_ms();
}

namespace {

std::string StrategyName(const TrainingJob& job) {
  const StrategyDef& s = job.strategy();
  if (s.has_mirrored()) return "mirrored";
  if (s.has_central_storage()) return "central_storage";
  return "multi_worker_mirrored";
}

}  // namespace

int LocalDevices(const TrainingJob& job) {
  const StrategyDef& s = job.strategy();
  if (s.has_mirrored()) return s.mirrored().devices() == 0 ? 2 : s.mirrored().devices();
  if (s.has_central_storage()) return s.central_storage().devices() == 0 ? 2 : s.central_storage().devices();
  if (s.has_multi_worker_mirrored()) return std::max(1, s.multi_worker_mirrored().devices());
  return 1;
}

int ReplicationFactor(const TrainingJob& job) { return std::max(1, job.replication().factor()); }

absl::Status CheckStrategy(const TrainingJob& job, int num_ps, int num_workers) {
  const int factor = job.replication().factor();
  if (factor < 0 || factor > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("job.replication.factor: ", factor, " is not 1 or 2 (more replicas are not built)"));
  }
  if (factor == 2 && IsCollective(job)) {
    return absl::InvalidArgumentError(
        "job.replication.factor: 2 replicates PS shards; only the parameter_server strategy has them");
  }
  if (factor == 2 && num_ps < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("job.replication.factor: 2 needs at least 2 ps tasks (a "
                     "backup on another PS), the cluster has ",
                     num_ps));
  }
  const int min_workers = job.failure().min_workers();
  if (min_workers < 0 || (min_workers > num_workers && num_workers > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("job.failure.min_workers: ", min_workers, " is not in [0, ",
                                                   num_workers, "] (the cluster's workers)"));
  }
  const int max_workers = job.failure().max_workers();
  if (max_workers != 0 && (max_workers < num_workers || max_workers > kMaxElasticWorkers)) {
    return absl::InvalidArgumentError(absl::StrCat("job.failure.max_workers: ", max_workers, " is not in [",
                                                   num_workers, " (the cluster's workers), ", kMaxElasticWorkers, "]"));
  }
  if (max_workers > num_workers && IsCollective(job)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job.failure.max_workers: workers joining beyond the cluster spec need the parameter-server strategy, not ",
        StrategyName(job)));
  }
  if (IsMirrored(job)) {
    const std::string field = "job.strategy." + StrategyName(job);
    if (num_ps > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": the cluster has ", num_ps,
                       " ps tasks, which this strategy does not use (workers hold the variables); remove them "
                       "from the cluster spec"));
    }
    if (num_workers < 1) return absl::InvalidArgumentError(absl::StrCat(field, ": the cluster has no worker"));
    if (!job.strategy().has_multi_worker_mirrored() && num_workers != 1) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": runs on one worker, the cluster has ", num_workers,
                                                     " (for several, use multi_worker_mirrored with devices)"));
    }
    if (job.strategy().multi_worker_mirrored().collective_timeout_ms() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".collective_timeout_ms: negative"));
    }
    const int devices = LocalDevices(job);
    if (devices < 1 || devices > 64) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".devices: ", devices, " is not in [1, 64]"));
    }
    return absl::OkStatus();
  }
  if (IsHybrid(job)) {
    if (num_ps < 1) {
      return absl::InvalidArgumentError("job.strategy.hybrid: needs at least one ps task for the embeddings");
    }
    if (job.strategy().hybrid().collective_timeout_ms() < 0) {
      return absl::InvalidArgumentError("job.strategy.hybrid.collective_timeout_ms: negative");
    }
    return absl::OkStatus();
  }
  if (num_ps < 1) {
    return absl::InvalidArgumentError(
        "job.strategy: parameter_server (the default) needs at least one ps task in the cluster spec; "
        "for a cluster of workers only, set strategy { multi_worker_mirrored {} }");
  }
  return absl::OkStatus();
}

absl::StatusOr<JobPlan> PlanJob(const TrainingJob& job, int num_ps) {
  ASSIGN_OR_RETURN(CompiledModel model, CompileModel(job));
  if (IsMirrored(job)) {
    for (const VariableDef& v : model.variables) {
      if (v.kind() != VariableDef::DENSE) {
        return absl::InvalidArgumentError(
            absl::StrCat("job.strategy.", StrategyName(job), ": ", v.name(),
                         " is an embedding table; mirrored strategies all-reduce dense variables only"));
      }
    }
    num_ps = 1;
  }
  std::vector<VariableDef> dense, sparse;
  if (IsHybrid(job)) {
    for (const VariableDef& v : model.variables) (v.kind() == VariableDef::DENSE ? dense : sparse).push_back(v);
    if (sparse.empty()) {
      return absl::InvalidArgumentError(
          "job.strategy.hybrid: the model has no embedding table to keep on the PS; use multi_worker_mirrored");
    }
  }
  JobPlan plan;
  plan.graph = std::move(model.graph);
  plan.loss_node = model.loss;
  plan.gradient_node = model.gradients;
  for (const auto& [name, t] : model.metrics) plan.metric_nodes.push_back(t);
  int64_t threshold = job.partition_threshold_bytes() > 0 ? job.partition_threshold_bytes() : int64_t{64} << 20;
  if (!IsHybrid(job)) {
    ASSIGN_OR_RETURN(plan.placement, PlaceVariables(model.variables, num_ps, threshold));
    if (ReplicationFactor(job) == 2 && num_ps >= 2) AssignBackups(&plan.placement, num_ps);
    return plan;
  }
  // Embeddings placed on the PS as usual; dense variables whole on store
  // num_ps, the worker's own replica.
  ASSIGN_OR_RETURN(plan.placement, PlaceVariables(sparse, num_ps, threshold));
  for (const VariableDef& v : dense) {
    VariablePlacement* vp = plan.placement.add_variable();
    *vp->mutable_variable() = v;
    vp->add_shard()->set_ps_task(num_ps);
  }
  return plan;
}

WorkerAssignment AssignmentOf(const TrainingJob& job, const JobPlan& plan) {
  WorkerAssignment a;
  *a.mutable_graph() = plan.graph;
  *a.mutable_placement() = plan.placement;
  *a.mutable_input() = job.input();
  *a.mutable_consistency() = job.consistency();
  a.set_loss_node(plan.loss_node);
  for (const auto& [v, g] : plan.gradient_node) (*a.mutable_gradient_node())[v] = g;
  for (const auto& m : plan.metric_nodes) a.add_metric_node(m);
  a.set_seed(job.seed());
  a.set_num_shards(1);
  *a.mutable_clip() = ClippingOf(job.optimizer());
  return a;
}

absl::Status CheckWorkerMessageSizes(const TrainingJob& job, const JobPlan& plan, int num_ps, int64_t max_message_bytes,
                                     int64_t slack) {
  auto check = [&](const char* what, int64_t bytes) -> absl::Status {
    if (bytes + slack <= max_message_bytes) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "a worker's ", what, " for this job is ", bytes, " bytes, more than the ", max_message_bytes,
        " bytes a worker receives in one message (--max_receive_message_mb, on the chief and every worker)"));
  };
  RETURN_IF_ERROR(
      check("Start (the compute graph and placement)", static_cast<int64_t>(AssignmentOf(job, plan).ByteSizeLong())));
  int64_t replica_bytes = 0;  // only mirrored strategies place variables on store num_ps
  for (const VariableDef& v : VariablesOnStore(plan.placement, num_ps)) {
    replica_bytes += static_cast<int64_t>(v.ByteSizeLong());
  }
  return check("CreateVariables (its replica's variables and initial values)", replica_bytes);
}

namespace {

// One batch: with every table whole, as the variables hold them; with a
// hash table among them, each table's rows for the batch's unique ids
// (gathered from a whole table, or read by `read_rows`), as a step is fed.
absl::StatusOr<GraphStepRunner::BatchEvaluation> EvaluateBatch(GraphStepRunner* runner,
                                                               const std::map<std::string, Tensor>& variables,
                                                               const RowReader& read_rows, const Batch& batch) {
  ASSIGN_OR_RETURN(RowRequest wanted, runner->SparseRows(batch));
  bool all_whole = true;
  for (const auto& [table, ids] : wanted) all_whole = all_whole && variables.count(table) > 0;
  if (all_whole) return runner->Evaluate(variables, batch);
  TensorMap rows;
  for (const auto& [table, ids] : wanted) {
    auto whole = variables.find(table);
    if (whole == variables.end()) {
      if (!read_rows) return absl::FailedPreconditionError(absl::StrCat("rows of ", table, " cannot be read here"));
      ASSIGN_OR_RETURN(rows[table], read_rows(table, ids));
      const int64_t dim = rows[table].shape().rank() == 2 ? rows[table].shape().dim(1) : -1;
      if (rows[table].dtype() != DT_FLOAT || rows[table].shape() != TensorShape({ids.NumElements(), dim})) {
        return absl::InternalError(absl::StrCat("rows of ", table, " came back as ", rows[table].shape().ToString()));
      }
      continue;
    }
    const Tensor& t = whole->second;
    if (t.dtype() != DT_FLOAT || t.shape().rank() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(table, " is not a float [rows, dim] table"));
    }
    const int64_t n = ids.NumElements(), dim = t.shape().dim(1), total = t.shape().dim(0);
    Tensor out(DT_FLOAT, TensorShape({n, dim}));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids.data<int64_t>()[i];
      if (id < 0 || id >= total) {
        return absl::InvalidArgumentError(absl::StrCat("id ", id, " is outside ", table, "'s ", total, " rows"));
      }
      std::memcpy(out.data<float>() + i * dim, t.data<float>() + id * dim, dim * sizeof(float));
    }
    rows[table] = std::move(out);
  }
  return runner->EvaluateRows(variables, rows, batch);
}

// The test split as the evaluator reads it: once, in order, large batches.
DatasetOptions TestSplitOptions(const TrainingJob& job) {
  DatasetOptions o;
  o.input = job.input();
  o.split = job.input().test();
  o.epochs = 1;
  o.shuffle = false;
  o.input.set_batch_size(std::max(job.input().batch_size(), 500));
  return o;
}

}  // namespace

absl::Status CheckTestSplit(const TrainingJob& job) {
  if (job.input().test().files_size() == 0) return absl::OkStatus();
  auto cannot = [](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat("input.test: the test split cannot be read, so the job would end with no final metric: ", why));
  };
  absl::StatusOr<std::unique_ptr<Dataset>> data = Dataset::Create(TestSplitOptions(job));
  if (!data.ok()) return cannot(data.status().message());
  Batch b;
  absl::StatusOr<bool> more = (*data)->Next(&b);
  if (!more.ok()) return cannot(more.status().message());
  if (!*more) return cannot("it holds no example");
  return absl::OkStatus();
}

Evaluator MakeEvaluator(const TrainingJob& job, const JobPlan& plan, int threads) {
  WorkerAssignment a = AssignmentOf(job, plan);
  return [job, a, threads](const std::map<std::string, Tensor>& variables,
                           const RowReader& read_rows) -> absl::StatusOr<std::map<std::string, float>> {
    if (job.input().test().files_size() == 0) return absl::FailedPreconditionError("the job has no test split");
    ASSIGN_OR_RETURN(auto runner, GraphStepRunner::Create(a, threads));
    ASSIGN_OR_RETURN(auto data, Dataset::Create(TestSplitOptions(job)));
    // The loss: the mean over examples of the batches' means. Each metric:
    // its statistics summed over the batches, finished once.
    double loss = 0;
    std::map<std::string, MetricStats> stats;
    int64_t n = 0;
    Batch b;
    while (job.eval().max_examples() == 0 || n < job.eval().max_examples()) {
      ASSIGN_OR_RETURN(bool more, data->Next(&b));
      if (!more) break;
      ASSIGN_OR_RETURN(auto m, EvaluateBatch(runner.get(), variables, read_rows, b));
      loss += static_cast<double>(m.loss) * b.size;
      for (const auto& [k, s] : m.metrics) {
        auto [it, fresh] = stats.emplace(k, MetricStats{s.op, {}});
        RETURN_IF_ERROR(it->second.Add(s.sums));
      }
      n += b.size;
    }
    if (n == 0) return absl::FailedPreconditionError("the test split is empty");
    std::map<std::string, float> out;
    out["loss"] = static_cast<float>(loss / n);
    for (const auto& [k, s] : stats) {
      ASSIGN_OR_RETURN(double value, FinishMetric(s));
      out[k] = static_cast<float>(value);
    }
    out["examples"] = static_cast<float>(n);
    return out;
  };
}

}  // namespace psrt
