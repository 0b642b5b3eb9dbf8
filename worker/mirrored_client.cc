#include "worker/mirrored_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {

MirroredClient::MirroredClient(ParameterServerCore* replica, CollectiveFactory make_collective,
                               std::unique_ptr<ParameterClient> embeddings)
    : replica_(replica, /*worker=*/0),
      embeddings_(std::move(embeddings)),
      make_collective_(std::move(make_collective)) {}

absl::StatusOr<TensorMap> MirroredClient::Pull(const std::vector<std::string>& variables, int64_t step) {
  return replica_.Pull(variables, step);
}

absl::StatusOr<TensorMap> MirroredClient::PullRows(const RowRequest& rows, int64_t step) {
  if (embeddings_ != nullptr) return embeddings_->PullRows(rows, step);
  return replica_.PullRows(rows, step);
}

absl::Status MirroredClient::Push(const RequestId& id, const TensorMap& dense,
                                  const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) {
  return PushAgreeing(id, dense, sparse, false).status();
}

absl::StatusOr<bool> MirroredClient::PushAgreeing(
    const RequestId& id, const TensorMap& dense,
    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse, bool pause) {
  if (!sparse.empty() && embeddings_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "multi_worker_mirrored all-reduces dense gradients only; ", sparse.begin()->first,
        " is sparse (an embedding): keep embeddings on parameter servers"));
  }
  RETURN_IF_ERROR(broken_);
  int64_t total = 1;  // the pause flag
  for (const auto& [name, g] : dense) {
    if (g.dtype() != DT_FLOAT) {
      return absl::InvalidArgumentError(absl::StrCat("gradient of ", name, " is not float32"));
    }
    total += g.NumElements();
  }
  if (collective_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Collective>> c = make_collective_();
    if (!c.ok()) {
      return absl::UnavailableError(absl::StrCat("forming the collective group: ", c.status().message()));
    }
    collective_ = *std::move(c);
  }
  // One fused all-reduce a step: the gradients end to end, then the flag.
  Tensor fused(DT_FLOAT, TensorShape({total}));
  float* data = fused.data<float>();
  int64_t offset = 0;
  for (const auto& [name, g] : dense) {
    std::memcpy(data + offset, g.raw_data(), g.TotalBytes());
    offset += g.NumElements();
  }
  data[offset] = pause ? 1.0f : 0.0f;
  absl::Status reduced = collective_->AllReduceSum(data, static_cast<size_t>(total));
  if (!reduced.ok()) {
    // Whatever the cause (a dead peer, a stopped one, an abort), the group
    // is gone: the chief re-forms it and restores a checkpoint.
    broken_ = absl::UnavailableError(absl::StrCat("all-reduce of step ", id.step(), " (rank ",
                                                  collective_->rank(), " of ", collective_->size(),
                                                  "): ", reduced.message()));
    return broken_;
  }
  const bool any_pause = data[offset] > 0.5f;
  const float scale = 1.0f / static_cast<float>(collective_->size());
  for (int64_t i = 0; i < offset; ++i) data[i] *= scale;
  // The mean gradients, as views of the fused buffer, applied to the replica.
  TensorMap mean;
  offset = 0;
  for (const auto& [name, g] : dense) {
    ASSIGN_OR_RETURN(mean[name], fused.Slice(offset, offset + g.NumElements()).Reshape(g.shape()));
    offset += g.NumElements();
  }
  RequestId local = id;
  local.set_worker(0);  // the replica's only writer
  RETURN_IF_ERROR(replica_.Push(local, mean, {}));
  // Hybrid: this worker's own row gradients to the PS, as the PS strategy
  // pushes them (each worker's rows, applied there as they come).
  if (!sparse.empty()) RETURN_IF_ERROR(embeddings_->Push(id, {}, sparse));
  return any_pause;
}

}  // namespace psrt
