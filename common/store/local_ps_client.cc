#include "common/store/local_ps_client.h"

#include "absl/synchronization/notification.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

absl::StatusOr<TensorMap> Wait(const std::function<void(ParameterServerCore::PullDone)>& call) {
  absl::Notification done;
  absl::Status status;
  TensorMap out;
  call([&](absl::Status s, NamedTensors t, int64_t) {
    status = s;
    for (auto& [name, tensor] : t) out[name] = std::move(tensor);
    done.Notify();
  });
  done.WaitForNotification();
  if (!status.ok()) return status;
  return out;
}

}  // namespace

absl::StatusOr<TensorMap> LocalPsClient::Pull(const std::vector<std::string>& variables, int64_t step) {
  return Wait([&](ParameterServerCore::PullDone done) {
    core_->Pull(variables, worker_, step, absl::Now() + absl::Seconds(60), std::move(done));
  });
}

absl::StatusOr<TensorMap> LocalPsClient::PullRows(const RowRequest& rows, int64_t step) {
  std::vector<std::pair<std::string, Tensor>> ids(rows.begin(), rows.end());
  return Wait([&](ParameterServerCore::PullDone done) {
    core_->PullRows(ids, worker_, step, absl::Now() + absl::Seconds(60), std::move(done));
  });
}

absl::Status LocalPsClient::Push(const RequestId& id, const TensorMap& dense,
                                 const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) {
  if (!sparse.empty()) {
    std::vector<SparseUpdate> rows;
    for (const auto& [v, iv] : sparse) rows.push_back({v, iv.first, iv.second});
    RETURN_IF_ERROR(core_->PushRows(id, rows).status());
  }
  NamedTensors grads(dense.begin(), dense.end());
  return core_->Push(id, grads).status();
}

}  // namespace psrt
