#include "common/compute/graph_step_runner.h"

#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/compute/executor.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

// First-occurrence unique ids and each id's position among them.
void Unique(const Tensor& ids, Tensor* unique, Tensor* index) {
  absl::flat_hash_map<int64_t, int64_t> pos;
  std::vector<int64_t> u;
  *index = Tensor(DT_INT64, ids.shape());
  for (int64_t i = 0; i < ids.NumElements(); ++i) {
    int64_t id = ids.data<int64_t>()[i];
    auto [it, inserted] = pos.emplace(id, static_cast<int64_t>(u.size()));
    if (inserted) u.push_back(id);
    index->data<int64_t>()[i] = it->second;
  }
  *unique = Tensor::FromVector<int64_t>(u, TensorShape({static_cast<int64_t>(u.size())}));
}

// Ids of the batch's feature for table t: int64, and inside a fixed
// table's rows.
absl::StatusOr<const Tensor*> TableIds(const TableFeed& t, const Batch& batch) {
  auto it = batch.tensors.find(t.feature);
  if (it == batch.tensors.end()) return absl::InvalidArgumentError(absl::StrCat("the batch has no feature ", t.feature));
  const Tensor& ids = it->second;
  if (ids.dtype() != DT_INT64) {
    return absl::InvalidArgumentError(absl::StrCat("feature \"", t.feature, "\" is ", DataTypeName(ids.dtype()),
                                                   ", not int64 ids (for table ", t.variable, ")"));
  }
  if (t.rows > 0) {
    const int64_t* p = ids.data<int64_t>();
    for (int64_t i = 0; i < ids.NumElements(); ++i) {
      if (p[i] < 0 || p[i] >= t.rows) {
        return absl::InvalidArgumentError(absl::StrCat("feature \"", t.feature, "\": id ", p[i], " (value ", i,
                                                       " of the batch) is outside table ", t.variable, "'s rows [0, ",
                                                       t.rows, ")"));
      }
    }
  }
  return &ids;
}

// A metric op's output (a float vector) as statistics to sum.
MetricStats StatsOf(const std::string& op, const Tensor& t) {
  MetricStats s{op, {}};
  s.sums.reserve(t.NumElements());
  for (int64_t i = 0; i < t.NumElements(); ++i) s.sums.push_back(t.data<float>()[i]);
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GraphStepRunner>> GraphStepRunner::Create(const WorkerAssignment& a,
                                                                         int threads,
                                                                         const ExecutorFactory& make) {
  auto r = std::unique_ptr<GraphStepRunner>(new GraphStepRunner());
  if (make) {
    ASSIGN_OR_RETURN(r->exec_, make(a.graph(), threads));
  } else {
    ExecutorOptions o;
    o.threads = threads;
    ASSIGN_OR_RETURN(r->exec_, Executor::Create(a.graph(), o));
  }
  r->device_ = r->exec_->device_name();
  std::map<std::string, VariableDef::Kind> kinds;
  std::map<std::string, int64_t> rows;
  for (const VariablePlacement& vp : a.placement().variable()) {
    kinds[vp.variable().name()] = vp.variable().kind();
    const auto& shape = vp.variable().shape();
    if (vp.variable().kind() == VariableDef::FIXED_TABLE && shape.dim_size() > 0) {
      rows[vp.variable().name()] = shape.dim(0);
    }
  }
  for (const NodeDef& n : a.graph().node()) {
    if (n.op() == "Placeholder") {
      r->inputs_.push_back(n.name());
    } else if (n.op() == "Variable") {
      auto k = kinds.find(n.name());
      if (k == kinds.end()) return absl::InvalidArgumentError(absl::StrCat("variable ", n.name(), " is not in the placement"));
      if (k->second == VariableDef::DENSE) {
        r->dense_.push_back(n.name());
      } else {
        r->tables_.push_back({n.name(), GetAttrS(n, "feature"), "", "", rows.count(n.name()) ? rows[n.name()] : 0});
      }
    }
  }
  // A table's index and row_splits placeholders are the EmbeddingBag's
  // inputs; an EmbeddingLookup has the index only.
  for (TableFeed& t : r->tables_) {
    for (const NodeDef& n : a.graph().node()) {
      if (n.op() == "EmbeddingBag" && n.input_size() == 3 && n.input(0) == t.variable) {
        t.index = n.input(1);
        t.row_splits = n.input(2);
      } else if (n.op() == "EmbeddingLookup" && n.input_size() == 2 && n.input(0) == t.variable) {
        t.index = n.input(1);
      }
    }
    if (t.index.empty() || t.feature.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t.variable, " has no EmbeddingBag or EmbeddingLookup reading it"));
    }
  }
  r->loss_ = a.loss_node();
  for (const auto& [v, g] : a.gradient_node()) r->grads_.emplace_back(v, g);
  for (int i = 0; i < a.metric_node_size(); ++i) {
    const std::string& m = a.metric_node(i);
    const std::string node = ParseTensorName(m).first;
    std::string op;
    for (const NodeDef& n : a.graph().node()) {
      if (n.name() == node) op = n.op();
    }
    if (!IsMetricOp(op)) {
      return absl::InvalidArgumentError(absl::StrCat("assignment.metric_node[", i, "]: ", m, " is no metric op's output",
                                                     op.empty() ? "" : absl::StrCat(" (", op, ")")));
    }
    r->metrics_.push_back({node, m, op});
  }
  r->seed_ = a.seed() * 7919 + a.shard_index();
  return r;
}

absl::StatusOr<RowRequest> GraphStepRunner::SparseRows(const Batch& batch) const {
  RowRequest req;
  for (const TableFeed& t : tables_) {
    ASSIGN_OR_RETURN(const Tensor* ids, TableIds(t, batch));
    Tensor unique, index;
    Unique(*ids, &unique, &index);
    req[t.variable] = unique;
  }
  return req;
}

absl::StatusOr<std::map<std::string, Tensor>> GraphStepRunner::Feeds(
    const TensorMap& dense, const TensorMap& rows, const Batch& batch, bool whole_tables,
    std::map<std::string, Tensor>* unique_ids) const {
  std::map<std::string, Tensor> feeds;
  for (const std::string& v : dense_) {
    auto it = dense.find(v);
    if (it == dense.end()) return absl::InvalidArgumentError(absl::StrCat("variable ", v, " was not pulled"));
    feeds[v] = it->second;
  }
  std::map<std::string, std::string> table_inputs;
  for (const TableFeed& t : tables_) {
    table_inputs[t.index] = t.variable;
    ASSIGN_OR_RETURN(const Tensor* ids_ptr, TableIds(t, batch));
    const Tensor& ids = *ids_ptr;
    auto r = rows.find(t.variable);
    if (r == rows.end()) return absl::InvalidArgumentError(absl::StrCat("rows of ", t.variable, " were not pulled"));
    feeds[t.variable] = r->second;
    if (!t.row_splits.empty()) {
      table_inputs[t.row_splits] = t.variable;
      auto splits = batch.tensors.find(RowSplitsKey(t.feature));
      if (splits == batch.tensors.end()) {
        return absl::InvalidArgumentError(absl::StrCat("the batch has no row splits of feature ", t.feature));
      }
      feeds[t.row_splits] = splits->second;
    }
    if (whole_tables) {
      feeds[t.index] = ids;
    } else {
      Tensor unique, index;
      Unique(ids, &unique, &index);
      feeds[t.index] = index;
      if (unique_ids) (*unique_ids)[t.variable] = unique;
    }
  }
  for (const std::string& in : inputs_) {
    if (table_inputs.count(in)) continue;
    auto it = batch.tensors.find(in);
    if (it == batch.tensors.end()) return absl::InvalidArgumentError(absl::StrCat("the batch has no input ", in));
    feeds[in] = it->second;
  }
  return feeds;
}

absl::StatusOr<StepResult> GraphStepRunner::Run(const TensorMap& dense, const TensorMap& rows,
                                                const Batch& batch, int64_t step) {
  return RunImpl(dense, rows, batch, step, nullptr);
}

absl::StatusOr<StepResult> GraphStepRunner::RunStreaming(const TensorMap& dense, const TensorMap& rows,
                                                         const Batch& batch, int64_t step,
                                                         const GradientReady& ready) {
  return RunImpl(dense, rows, batch, step, &ready);
}

absl::StatusOr<StepResult> GraphStepRunner::RunImpl(const TensorMap& dense, const TensorMap& rows,
                                                    const Batch& batch, int64_t step,
                                                    const GradientReady* ready) {
  std::map<std::string, Tensor> unique;
  ASSIGN_OR_RETURN(auto feeds, Feeds(dense, rows, batch, false, &unique));
  std::vector<std::string> fetches = {loss_};
  for (const auto& [v, g] : grads_) fetches.push_back(g);
  for (const MetricFetch& m : metrics_) fetches.push_back(m.tensor);
  // Fetch 1 + i is variable i's gradient: a dense one goes to `ready` now.
  StepExecutor::FetchReady on_fetch;
  if (ready != nullptr) {
    on_fetch = [&](size_t f, const Tensor& t) {
      if (f < 1 || f > grads_.size() || unique.count(grads_[f - 1].first)) return;
      (*ready)(grads_[f - 1].first, t);
    };
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> out,
                   exec_->RunStreaming(feeds, fetches, seed_ + 1000003 * static_cast<uint64_t>(step + 1), true,
                                       on_fetch));
  StepResult r;
  r.loss = out[0].data<float>()[0];
  for (size_t i = 0; i < grads_.size(); ++i) {
    const std::string& v = grads_[i].first;
    auto u = unique.find(v);
    if (u == unique.end()) {
      if (ready == nullptr) r.dense_gradients[v] = out[1 + i];
    } else {
      r.sparse_gradients[v] = {u->second, out[1 + i]};
    }
  }
  // A training step shows its batch's value of each metric.
  for (size_t i = 0; i < metrics_.size(); ++i) {
    ASSIGN_OR_RETURN(double value, FinishMetric(StatsOf(metrics_[i].op, out[1 + grads_.size() + i])));
    r.metrics[metrics_[i].name] = static_cast<float>(value);
  }
  return r;
}

absl::StatusOr<GraphStepRunner::BatchEvaluation> GraphStepRunner::Evaluate(const TensorMap& variables,
                                                                           const Batch& batch) {
  ASSIGN_OR_RETURN(auto feeds, Feeds(variables, variables, batch, true, nullptr));
  return EvaluateFeeds(feeds);
}

absl::StatusOr<GraphStepRunner::BatchEvaluation> GraphStepRunner::EvaluateRows(const TensorMap& dense,
                                                                               const TensorMap& rows,
                                                                               const Batch& batch) {
  ASSIGN_OR_RETURN(auto feeds, Feeds(dense, rows, batch, false, nullptr));
  return EvaluateFeeds(feeds);
}

absl::StatusOr<GraphStepRunner::BatchEvaluation> GraphStepRunner::EvaluateFeeds(
    const std::map<std::string, Tensor>& feeds) {
  std::vector<std::string> fetches = {loss_};
  for (const MetricFetch& m : metrics_) fetches.push_back(m.tensor);
  ASSIGN_OR_RETURN(std::vector<Tensor> out, exec_->Run(feeds, fetches, 0, false));
  BatchEvaluation r;
  r.loss = out[0].data<float>()[0];
  for (size_t i = 0; i < metrics_.size(); ++i) r.metrics[metrics_[i].name] = StatsOf(metrics_[i].op, out[1 + i]);
  return r;
}

}  // namespace psrt
