#include "common/store/push_ledger.h"

#include <algorithm>
#include <cstring>

#include "common/status_macros.h"
#include "common/store/parallel_apply.h"

namespace psrt {

bool PushLedger::Seen(const std::map<int, WorkerPushes>& seen, const RequestId& id) {
  auto it = seen.find(id.worker());
  return it != seen.end() && it->second.incarnation == id.worker_incarnation() &&
         it->second.steps.count(id.step()) > 0;
}

void PushLedger::Record(std::map<int, WorkerPushes>* seen, const RequestId& id) {
  WorkerPushes& w = (*seen)[id.worker()];
  if (w.incarnation != id.worker_incarnation()) {
    w.incarnation = id.worker_incarnation();
    w.steps.clear();
  }
  w.steps.insert(id.step());
  while (w.steps.size() > kRecentPushes) w.steps.erase(w.steps.begin());
}

void PushLedger::GatherDense(int worker, const NamedTensors& grads) {
  for (const auto& [name, grad] : grads) {
    auto it = sync_dense_.find(name);
    if (it == sync_dense_.end()) {
      auto spare = spare_dense_.find(name);
      if (spare != spare_dense_.end() && spare->second.dtype() == grad.dtype() &&
          spare->second.shape() == grad.shape()) {
        Tensor sum = std::move(spare->second);
        spare_dense_.erase(spare);
        std::memcpy(sum.raw_data(), grad.raw_data(), grad.TotalBytes());
        sync_dense_[name] = std::move(sum);
      } else {
        sync_dense_[name] = grad.Copy();
      }
    } else {
      it->second.flat<float>() += grad.flat<float>();
    }
  }
  sync_pushed_.insert(worker);
}

void PushLedger::GatherRows(const std::vector<SparseUpdate>& rows) {
  for (const SparseUpdate& u : rows) sync_rows_[u.variable].emplace_back(u.ids, u.values);
}

absl::Status PushLedger::ApplyMean(int num_workers,
                                   const std::function<absl::StatusOr<Variable*>(const std::string&)>& find,
                                   WorkPool* pool) {
  const float scale = 1.0f / static_cast<float>(num_workers);
  std::vector<Variable*> dense_vars;
  std::vector<const Tensor*> dense_grads;
  for (auto& [name, sum] : sync_dense_) {
    if (num_workers != 1) sum.flat<float>() *= scale;
    ASSIGN_OR_RETURN(Variable * v, find(name));
    dense_vars.push_back(v);
    dense_grads.push_back(&sum);
  }
  RETURN_IF_ERROR(ApplyDenseAll(pool, dense_vars, dense_grads));
  for (auto& [name, parts] : sync_rows_) {
    ASSIGN_OR_RETURN(Variable * v, find(name));
    int64_t n = 0, dim = 0;
    for (const auto& [ids, vals] : parts) {
      n += ids.NumElements();
      dim = vals.shape().dim(1);
    }
    Tensor ids(DT_INT64, TensorShape({n}));
    Tensor vals(DT_FLOAT, TensorShape({n, dim}));
    int64_t at = 0;
    for (const auto& [i, g] : parts) {
      std::copy(i.data<int64_t>(), i.data<int64_t>() + i.NumElements(), ids.data<int64_t>() + at);
      for (int64_t k = 0; k < g.NumElements(); ++k) vals.data<float>()[at * dim + k] = g.data<float>()[k] * scale;
      at += i.NumElements();
    }
    RETURN_IF_ERROR(v->ApplyRows(ids, vals, pool));
  }
  spare_dense_.clear();
  for (auto& [name, sum] : sync_dense_) {
    if (sum.buffer().use_count() == 1) spare_dense_[name] = std::move(sum);  // nothing else holds it
  }
  sync_dense_.clear();
  sync_rows_.clear();
  sync_pushed_.clear();
  return absl::OkStatus();
}

void PushLedger::Clear() {
  sync_pushed_.clear();
  sync_dense_.clear();
  spare_dense_.clear();
  sync_rows_.clear();
  pushes_.clear();
  rows_.clear();
  parts_.Clear();
}

}  // namespace psrt
