// What a worker's step loop needs from the parameter servers: pull and
// push against every PS of the job. The gRPC client (ps_client.h) and the
// in-process one (ps/local_ps_client.h) implement it; unit tests use fakes.
#ifndef PSRT_COMMON_TRANSPORT_PARAMETER_CLIENT_H_
#define PSRT_COMMON_TRANSPORT_PARAMETER_CLIENT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/ps_service.pb.h"

namespace psrt {

using TensorMap = std::map<std::string, Tensor>;

// Rows of sparse variables a step reads: variable -> unique ids.
using RowRequest = std::map<std::string, Tensor>;

// One step's push in parts (buckets, issue #13), as Horovod and PyTorch DDP
// send all-reduce buckets: the gradients a backward pass has finished leave
// while it makes the rest. Made by ParameterClient::StartBucketedPush; used
// by one thread (the one running the step).
//
//   std::unique_ptr<BucketedPush> push = client->StartBucketedPush(id, 256 << 10);
//   runner->RunStreaming(..., [&](const std::string& v, const Tensor& g) { push->Add(v, g); });
//   RETURN_IF_ERROR(push->Finish(result.sparse_gradients));
class BucketedPush {
 public:
  // Waits for the parts already sent (never sent again); with no Finish,
  // no last part leaves and the PS never counts the step.
  virtual ~BucketedPush() = default;
  // A dense gradient (whole variable) of the step. Each PS's gradients
  // leave as one part once they reach the bucket size. A failure is
  // returned by Finish.
  virtual void Add(const std::string& variable, const Tensor& gradient) = 0;
  // Sends what is left, with the sparse gradients, as each PS's last part
  // (every PS the worker uses gets one: each counts the step), and waits
  // for every part's answer: OK when all were taken, else the first error.
  virtual absl::Status Finish(const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) = 0;
};

// Pulls and pushes against every PS of the job, in parallel where it can.
// A pull (on the worker's prefetch thread) may run while a push (on its loop
// thread) does; implementations allow that one pull and one push at once.
class ParameterClient {
 public:
  virtual ~ParameterClient() = default;
  // Dense variables, whole (slices of a partitioned one are joined).
  // SYNC / BOUNDED_STALENESS: waits until the parameters for `step` exist.
  // UNAVAILABLE when a PS is down; NOT_FOUND when a PS lost its variables.
  virtual absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& variables,
                                         int64_t step) = 0;
  // Rows of sparse variables: for each variable, [n, dim] in the order of ids.
  virtual absl::StatusOr<TensorMap> PullRows(const RowRequest& rows, int64_t step) = 0;
  // Dense gradients (whole variables) and sparse ones (ids + rows).
  virtual absl::Status Push(const RequestId& id, const TensorMap& dense,
                            const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) = 0;
  // A push of step `id` in parts of about `bucket_bytes` per PS, or null
  // where the client cannot (the worker then pushes the step whole). The
  // parts carry id with RequestId.bucket and last_bucket set.
  virtual std::unique_ptr<BucketedPush> StartBucketedPush(const RequestId& id, size_t bucket_bytes) {
    return nullptr;
  }
  // The generation the chief issued at the last start or restore: pulls
  // carry it from now on (pushes carry theirs in the RequestId), and a PS at
  // another generation refuses them. Clients of a PS with no chief ignore it.
  virtual void SetGeneration(int64_t generation) {}
  // Replicated shards (job.replication): the placement epoch and the PS
  // serving each store as primary, from the chief (at start, and after a
  // failover). Requests carry the epoch from then on. Callable from any
  // thread, also while a pull or push runs. Clients with no PS ignore it.
  virtual void SetRoute(const ReplicaRoute& route) {}
  // Replicated shards, a failover: the chief gave up on these PS tasks
  // (stopped, hung, cut off). Calls in flight to them end now with
  // CANCELLED (a push so ended is not acknowledged: the worker runs its
  // step again, under the same request id), and new ones fail at once
  // with CANCELLED until the next SetRoute. Any thread, like SetRoute.
  virtual void Abandon(const std::vector<int>& ps_tasks) {}

  // Clients of a mirrored strategy run every step in lockstep with the
  // other workers of their group: a worker that stopped between steps on
  // its own would stall the others inside the step's all-reduce. For them
  // the worker pushes with PushAgreeing(), which carries its wish to pause
  // after this step and returns whether any member of the group had it, so
  // that the whole group pauses after the same step.
  virtual bool lockstep() const { return false; }
  virtual absl::StatusOr<bool> PushAgreeing(
      const RequestId& id, const TensorMap& dense,
      const std::map<std::string, std::pair<Tensor, Tensor>>& sparse, bool pause) {
    absl::Status s = Push(id, dense, sparse);
    if (!s.ok()) return s;
    return pause;
  }
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PARAMETER_CLIENT_H_
