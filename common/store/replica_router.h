// ReplicaRouter: a PS's stores when the job replicates its shards
// (job.replication.factor 2, issue #15). A PS serves its own store (store
// N on ps:N) and holds a backup of another (ps:N-1's); after a failover it
// serves that one as primary too. Each store is a ParameterServerCore of
// its own, so values, optimizer slots, step counters and the record of
// applied request ids are all per store, exactly as on the primary.
//
// Replication is forward-then-acknowledge, in order: a primary applies a
// push and forwards the same request bytes (same request id) to its
// backup, which applies them the same way; the worker hears back only
// after the backup answered. One push at a time per store, on the store's
// own thread (the store's lock is held across the apply and the forward),
// so the backup applies the pushes in the primary's order and ends
// bit-identical (the optimizer is deterministic). gRPC's threads never wait
// on another PS: with two PS each the other's backup, handlers blocked on
// forwards starved both servers (seen: a PS stopped answering at step 2). A push whose forward fails is not acknowledged; its
// retry is a duplicate on the primary (nothing applied again) and is
// forwarded again, so the backup gets it once too.
//
// Why each request and not the aggregated update (the PS paper's
// "replication after aggregation"): in ASYNC there is nothing to aggregate,
// every push is applied as it comes; forwarding the request keeps the
// request-id dedup exact on the backup, and the backup's state (values,
// slots, step counters, SYNC's partial sums) follows by construction. In
// SYNC, forwarding the step's mean once instead of N gradients would cost
// less on the wire; not built nor measured yet. Measured cost of this one:
// tests/bench:distribution_bench (two PS, factor 1 vs 2).
//
// Epochs against split brain: the chief moves every PS to a placement
// epoch (CreateVariables with a ReplicaConfig); requests carry theirs
// (replica_header.h) and one of another epoch is refused with
// FAILED_PRECONDITION naming both. A promoted backup refuses the forwards
// of its old primary (it is no backup any more, and they carry the old
// epoch), so a primary cut off and come back can acknowledge nothing.
//
// Without replication (no ReplicaConfig ever received) every request goes
// to the PS's own core as before. Thread-safe.
#ifndef PSRT_COMMON_STORE_REPLICA_ROUTER_H_
#define PSRT_COMMON_STORE_REPLICA_ROUTER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/channel_cache.h"
#include "common/store/server_core.h"
#include "common/transport/ps_tcp_channel.h"
#include "common/transport/replica_header.h"
#include "grpcpp/channel.h"
#include "proto/ps_service.pb.h"

namespace psrt {

class ReplicaRouter {
 public:
  // `own` (not owned) is the PS's store `base.task_index`; backups are made
  // with `base` (their snapshot store named ps-<store>-on-ps-<task>). `channels` (not
  // owned, may be null: no forwarding) reaches the backups.
  ReplicaRouter(ParameterServerCore* own, ServerCoreOptions base, ChannelCache* channels);

  // CreateVariables as the chief sends it: without a ReplicaConfig to the
  // own core; with one, to that store's core (a backup's made on first
  // use) after the role and epoch are checked and set. Refused: an epoch
  // older than this PS's, a backup of the PS's own store, promoting a store
  // this PS holds no copy of.
  absl::StatusOr<CreateVariablesResponse> CreateVariables(const CreateVariablesRequest& req);

  // The core a pull or control call is for: the own core without a header,
  // else the store it names, served here as primary, at this epoch.
  // `control` (the chief's Snapshot/Restore/Status) may address a backup.
  absl::StatusOr<ParameterServerCore*> Resolve(const ReplicaHeader& h, bool control = false);

  // A push: `apply` runs on the store's core, then (a primary with a
  // backup) the request bytes `raw` are forwarded and waited for; `done`
  // gets the answer, once, maybe on another thread, maybe before Push
  // returns. `raw`, `apply` and what they refer to must live until then.
  // A replica push (h.replica) is applied on a backup only.
  using Apply = std::function<absl::StatusOr<PushResponse>(ParameterServerCore*)>;
  using PushDone = std::function<void(absl::StatusOr<PushResponse>)>;
  void Push(const ReplicaHeader& h, const grpc::ByteBuffer* raw, Apply apply, PushDone done);

  int64_t epoch() const { return epoch_.load(); }
  // Each store this PS holds a copy of, as what it serves it as: its own
  // (store == task index, a primary unless the chief said otherwise) and
  // any backups or promoted backups. For /metrics; any thread, and it never
  // waits for a push (a store's lock is held across a forward).
  struct StoreRole {
    int store = 0;
    bool backup = false;
  };
  std::vector<StoreRole> Roles() const;
  int64_t stale_refused() const { return stale_refused_.load(); }

 private:
  // Runs closures one at a time, in order, on its own thread; drains what
  // is queued before its destructor returns.
  class SerialQueue {
   public:
    SerialQueue();
    ~SerialQueue();
    void Post(std::function<void()> f);

   private:
    absl::Mutex mu_;
    std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
    bool stop_ ABSL_GUARDED_BY(mu_) = false;
    std::thread thread_;
  };
  struct Store {
    SerialQueue pushes;  // a primary's pushes, while it has a backup
    std::unique_ptr<ParameterServerCore> owned;  // null for the PS's own store
    ParameterServerCore* core = nullptr;
    // Held across a push's apply and forward: one at a time, in order.
    absl::Mutex mu;
    std::atomic<bool> backup{false};  // written under mu; pulls read it without
    int64_t epoch ABSL_GUARDED_BY(mu) = 0;  // of the last role change
    int backup_task ABSL_GUARDED_BY(mu) = -1;
    std::shared_ptr<grpc::Channel> to_backup ABSL_GUARDED_BY(mu);
    // The same backup's TCP data plane (its forwards go there when it
    // offers one; by gRPC otherwise).
    std::shared_ptr<PsTcpChannel> to_backup_tcp ABSL_GUARDED_BY(mu);
    // The forward in flight (held under mu too), so that a role change
    // need not wait for a stopped backup's deadline: it cancels it.
    absl::Mutex forward_mu ABSL_ACQUIRED_AFTER(mu);
    grpc::ClientContext* forwarding ABSL_GUARDED_BY(forward_mu) = nullptr;
    PsTcpChannel* forwarding_tcp ABSL_GUARDED_BY(forward_mu) = nullptr;
    uint64_t forwarding_tcp_id ABSL_GUARDED_BY(forward_mu) = 0;
    int64_t cancels ABSL_GUARDED_BY(forward_mu) = 0;  // role changes that cancelled forwards
  };
  absl::Status CheckEpoch(int64_t epoch, absl::string_view what) const;
  absl::StatusOr<Store*> Find(int store) const;
  // Sends `raw` to the backup as a replica push of `store`; waits.
  absl::Status Forward(Store* s, int store, int64_t epoch, const grpc::ByteBuffer& raw)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu);
  // Forward over the backup's TCP data plane.
  absl::Status ForwardTcp(Store* s, int store, int64_t epoch, const grpc::ByteBuffer& raw)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu);
  // The push on store `s` (found for h), its checks, apply and forward.
  absl::StatusOr<PushResponse> PushLocked(Store* s, const ReplicaHeader& h, const grpc::ByteBuffer& raw,
                                          const Apply& apply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu);

  ParameterServerCore* const own_;
  const ServerCoreOptions base_;
  ChannelCache* const channels_;
  std::atomic<int64_t> epoch_{0};  // 0: not replicating
  mutable std::atomic<int64_t> stale_refused_{0};

  mutable absl::Mutex mu_;  // guards the map; each Store locks itself
  std::map<int, std::unique_ptr<Store>> stores_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_REPLICA_ROUTER_H_
