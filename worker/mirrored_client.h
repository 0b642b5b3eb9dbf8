// MirroredClient: the ParameterClient of a worker in a mirrored strategy.
// The worker holds a full replica of the variables and optimizer slots in a
// ParameterServerCore of its own (the same code a PS runs, and served to the
// chief for CreateVariables, Snapshot and Restore like a PS). A pull reads
// the replica; a push sums the step's dense gradients across the group in
// one fused all-reduce, averages them and applies them to the replica. Every
// member reduces in the same order and applies the same bytes with the same
// optimizer, so replicas stay bit-identical. Under the hybrid strategy the
// embedding tables stay on the PS: their rows are pulled from and pushed to
// it as with the PS strategy.
//
// The group is formed on the first push (on the worker's loop thread, so a
// Start returns at once). A failed all-reduce breaks the group for good:
// every later push fails at once with UNAVAILABLE, the worker parks and the
// chief re-forms the group with a new Start.
//
//   MirroredClient client(&replica, [&] { return FormRing(assignment.collective()); });
//   ASSIGN_OR_RETURN(bool pause, client.PushAgreeing(id, grads, {}, pause_wanted));
//
// Thread-compatible: one pull and one push at a time, as ParameterClient.
#ifndef PSRT_WORKER_MIRRORED_CLIENT_H_
#define PSRT_WORKER_MIRRORED_CLIENT_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/collective/collective.h"
#include "common/store/local_ps_client.h"
#include "common/store/server_core.h"
#include "common/transport/parameter_client.h"

namespace psrt {

class MirroredClient : public ParameterClient {
 public:
  using CollectiveFactory = std::function<absl::StatusOr<std::unique_ptr<Collective>>()>;

  // `replica` is not owned and outlives the client. `embeddings` (hybrid:
  // the PS holding the embedding tables; may be null) serves the row pulls,
  // and takes the step's row gradients once the dense all-reduce is done.
  MirroredClient(ParameterServerCore* replica, CollectiveFactory make_collective,
                 std::unique_ptr<ParameterClient> embeddings = nullptr);

  absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& variables, int64_t step) override;
  absl::StatusOr<TensorMap> PullRows(const RowRequest& rows, int64_t step) override;
  absl::Status Push(const RequestId& id, const TensorMap& dense,
                    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) override;
  void SetGeneration(int64_t generation) override {
    if (embeddings_ != nullptr) embeddings_->SetGeneration(generation);
  }
  bool lockstep() const override { return true; }
  absl::StatusOr<bool> PushAgreeing(const RequestId& id, const TensorMap& dense,
                                    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse,
                                    bool pause) override;

 private:
  LocalPsClient replica_;
  const std::unique_ptr<ParameterClient> embeddings_;
  const CollectiveFactory make_collective_;
  std::unique_ptr<Collective> collective_;
  absl::Status broken_;  // the first collective failure; sticky
};

}  // namespace psrt

#endif  // PSRT_WORKER_MIRRORED_CLIENT_H_
