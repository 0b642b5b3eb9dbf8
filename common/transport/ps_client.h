// PsClient: the worker's ParameterClient over gRPC. It routes each variable
// to the PS shards the placement map names, sends requests to different PS
// in parallel, joins row slices of partitioned variables on pull and slices
// gradients (without copying) on push, and routes embedding ids to their
// shard (fixed tables by row range, hash tables by id mod shards).
//
//   PsClient ps(assignment.placement(), ps_addresses, &channels, {worker_index});
//   ASSIGN_OR_RETURN(TensorMap w, ps.Pull({"dense/kernel"}, step));
//
// Thread-compatible: one caller at a time.
#ifndef PSRT_COMMON_TRANSPORT_PS_CLIENT_H_
#define PSRT_COMMON_TRANSPORT_PS_CLIENT_H_

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_pool.h"
#include "common/rpc/channel_cache.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/worker_service.pb.h"
#include "common/transport/ps_call_channel.h"
#include "common/transport/ps_wire.h"
#include "common/transport/parameter_client.h"

namespace psrt {

// How the data-path calls (Pull, PullRows, Push, PushRows) travel to a PS.
enum class PsTransport {
  kUnary,   // one gRPC call each
  kStream,  // frames of one long-lived gRPC stream per PS (ps_stream.h); over 1 MiB unary
  kTcp,     // frames of one TCP connection per PS (ps_tcp_channel.h), where the PS
            // offers its TCP data plane; else as kStream
};

struct PsClientOptions {
  int worker = 0;
  absl::Duration timeout = absl::Seconds(30);
  // PullRows never makes hash-table rows (PullRowsRequest.read_only): for
  // readers that are not training, such as the chief's evaluation.
  bool read_only_rows = false;
  // The bytes, ids and checks are the same whichever way they travel.
  PsTransport transport = PsTransport::kTcp;
};

// "unary", "stream" or "tcp" (flags); INVALID_ARGUMENT naming the others.
absl::StatusOr<PsTransport> ParsePsTransport(absl::string_view name);

// Over the gRPC stream, larger requests go as unary calls: their per-call
// cost is small beside their bytes, they do not queue behind each other on
// one HTTP/2 stream, and a PS can refuse one over its size limit without
// ending a stream (every PS accepts messages of at least 2 MiB). Over TCP
// every size is framed (the PS answers an oversized frame and skips it)
// up to kMaxTcpFramedBytes, past which a frame's offsets would not fit.
inline constexpr size_t kMaxStreamedBytes = 1 << 20;
inline constexpr size_t kMaxTcpFramedBytes = size_t{1} << 31;

class PsClient : public ParameterClient {
 public:
  PsClient(const PlacementMap& placement, std::vector<std::string> ps_addresses,
           ChannelCache* channels, PsClientOptions options);

  absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& variables, int64_t step) override;
  absl::StatusOr<TensorMap> PullRows(const RowRequest& rows, int64_t step) override;
  absl::Status Push(const RequestId& id, const TensorMap& dense,
                    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) override;
  // Parts of about `bucket_bytes` per PS (ps_bucketed_push.h).
  std::unique_ptr<BucketedPush> StartBucketedPush(const RequestId& id, size_t bucket_bytes) override;
  void SetGeneration(int64_t generation) override { generation_ = generation; }
  void SetRoute(const ReplicaRoute& route) override;
  // Ends the calls in flight to these tasks (CANCELLED) and refuses new
  // ones until the next SetRoute.
  void Abandon(const std::vector<int>& ps_tasks) override;

  // One raw call to one PS, for tools and benchmarks.
  absl::StatusOr<grpc::ByteBuffer> Call(int ps, const std::string& method,
                                        const grpc::ByteBuffer& request);
  int num_ps() const { return static_cast<int>(stubs_.size()); }

 private:
  struct Shard {
    int ps;
    int64_t row_begin;
    int64_t row_end;
  };
  friend class PsBucketedPush;
  // Calls under way (StartCalls), until WaitCalls has every answer.
  struct Pending {
    // Shared with the callbacks: the last one may still be returning when
    // WaitCalls has what it waits for.
    struct Waiter {
      absl::Mutex mu;
      size_t left ABSL_GUARDED_BY(mu) = 0;
      std::vector<absl::StatusOr<grpc::ByteBuffer>> out ABSL_GUARDED_BY(mu);
    };
    struct Unary {
      grpc::ClientContext ctx;
      grpc::ByteBuffer response;
    };
    std::shared_ptr<Waiter> w = std::make_shared<Waiter>();
    std::vector<std::unique_ptr<Unary>> unary;
    std::vector<std::pair<PsCallChannel*, uint64_t>> streamed;
    std::vector<int> task;
    std::vector<std::string> methods;
    absl::Time deadline;
  };
  // Sends one request per entry in parallel; fills the responses in order.
  std::vector<absl::StatusOr<grpc::ByteBuffer>> CallAll(
      const std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>>& calls);
  // CallAll in two halves: the calls leave now, WaitCalls (called once for
  // each, before the Pending is dropped) waits for their answers.
  std::unique_ptr<Pending> StartCalls(
      const std::vector<std::pair<int, std::pair<std::string, grpc::ByteBuffer>>>& calls);
  std::vector<absl::StatusOr<grpc::ByteBuffer>> WaitCalls(Pending* p);
  // Adds a dense gradient to the push of each PS holding (a slice of) it.
  absl::Status RouteDense(const std::string& v, const Tensor& grad, std::map<int, pswire::PushArgs>* per_ps) const;
  // Adds sparse gradients' rows to the push of the PS holding each id.
  absl::Status RouteSparse(const std::map<std::string, std::pair<Tensor, Tensor>>& sparse,
                           std::map<int, pswire::PushArgs>* per_ps) const;
  // A push's answer from `ps`: OK, or why the push did not count.
  static absl::Status CheckPushAnswer(int ps, const RequestId& id, bool with_rows,
                                      const absl::StatusOr<grpc::ByteBuffer>& answer);
  // For each id: the shard index of `variable` that holds it.
  absl::StatusOr<std::vector<int>> Route(const std::string& variable, const Tensor& ids) const;

  const PsClientOptions options_;
  const std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  // One per PS, unless options_.transport is kUnary.
  std::vector<std::unique_ptr<PsCallChannel>> framed_;
  size_t max_framed_bytes_ = 0;  // larger requests go unary
  std::map<std::string, VariablePlacement> placement_;
  std::map<std::string, std::vector<Shard>> shards_;
  std::vector<int> used_ps_;  // every PS holding a variable
  std::atomic<int64_t> generation_{0};
  // Calls go to store s on ps task route_.store_task(s) with the epoch in
  // their metadata; epoch 0 = store s on ps task s, no metadata.
  absl::Mutex route_mu_;
  ReplicaRoute route_ ABSL_GUARDED_BY(route_mu_);
  // Unary calls in flight (task -> context, alive while listed) and the
  // tasks abandoned since the last SetRoute (see Abandon).
  absl::Mutex inflight_mu_;
  std::multimap<int, grpc::ClientContext*> inflight_ ABSL_GUARDED_BY(inflight_mu_);
  // Framed calls of a replicated job in flight (task -> channel, call id).
  std::multimap<int, std::pair<PsCallChannel*, uint64_t>> inflight_framed_ ABSL_GUARDED_BY(inflight_mu_);
  std::set<int> abandoned_ ABSL_GUARDED_BY(inflight_mu_);
  // Storage for pulled tensors: reused once the caller drops them.
  const std::shared_ptr<BufferPool> pool_ = BufferPool::Create();
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_CLIENT_H_
