// The ParameterServer gRPC service: the edge over ParameterServerCore.
//
// Push, Pull, PullRows and PushRows are raw callback methods: their bytes
// are read and written by ps_wire.h (no protobuf copies), and a pull that
// must wait (SYNC, bounded staleness) parks a callback in the core instead
// of a thread. The control methods are ordinary callback methods. Status is
// converted to gRPC here only.
#ifndef PSRT_COMMON_STORE_PS_SERVICE_H_
#define PSRT_COMMON_STORE_PS_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "common/rpc/security.h"
#include "common/transport/ps_frame.h"
#include "proto/ps_service.grpc.pb.h"
#include "common/store/ps_metrics.h"
#include "common/store/replica_router.h"
#include "common/store/server_core.h"

namespace psrt {

// Every method is raw: the data path is read by ps_wire.h, the control
// methods are parsed by ServeParsed (common/rpc/parsed_unary.h) so that
// unparsable bytes get INVALID_ARGUMENT naming the method.
using PsServiceBase = ParameterServer::WithRawCallbackMethod_OpenDataPlane<ParameterServer::WithRawCallbackMethod_Exchange<ParameterServer::WithRawCallbackMethod_Pull<
    ParameterServer::WithRawCallbackMethod_Push<ParameterServer::WithRawCallbackMethod_PullRows<
        ParameterServer::WithRawCallbackMethod_PushRows<ParameterServer::WithRawCallbackMethod_CreateVariables<
            ParameterServer::WithRawCallbackMethod_Snapshot<ParameterServer::WithRawCallbackMethod_Restore<
                ParameterServer::WithRawCallbackMethod_Status<
                    ParameterServer::WithRawCallbackMethod_MoveVariables<ParameterServer::Service>>>>>>>>>>>;

class PsTcpServer;

// Who sent a data call, and the store and epoch it names, as its transport
// told: a gRPC call's metadata and certificate, or a TCP data-plane
// connection's ticket (ps_tcp_server.h).
struct DataCaller {
  grpc::Status identified;  // why the caller is not known (UNAUTHENTICATED), or OK
  Caller caller;
  // Who per-caller limits count against (IdentityKey), never a field of
  // the request. Empty: the caller's name.
  std::string key;
  absl::StatusOr<ReplicaHeader> header = ReplicaHeader();
};

// Who a caller is for per-caller limits: the task its certificate names
// ("certificate worker-0"), else its identity (a role's or the shared
// token, or none) and `where` it calls from (a connection, an address): a
// caller that holds no task's identity counts on its own, and cannot spend
// another's share by naming it in a request.
std::string IdentityKey(const Caller& caller, absl::string_view where);

// Calls in flight per caller; an entry lives while its count is above 0.
// `answer_bytes`: bytes of pull answers made and not yet written to the
// caller (likewise).
struct CallerCounts {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, int64_t> in_flight ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<std::string, int64_t> answer_bytes ABSL_GUARDED_BY(mu);
  int64_t total_answer_bytes ABSL_GUARDED_BY(mu) = 0;  // over every caller
};

class PsServiceImpl final : public PsServiceBase {
 public:
  // `core` is not owned and outlives the service.
  explicit PsServiceImpl(ParameterServerCore* core) : core_(core) {}
  // Every call is checked by `auth` first (set before the server starts).
  void set_authenticator(RequestAuthenticator auth) { auth_ = std::move(auth); }
  // Most pulls (Pull, PullRows) and, separately, most pushes (Push,
  // PushRows) served at once; a parked SYNC pull counts until it answers.
  // More are refused with RESOURCE_EXHAUSTED, so a flood of clients cannot
  // make the server hold unbounded requests. Separate budgets keep parked
  // pulls from refusing the pushes that would release them. Control calls
  // (create, snapshot, restore, status) are not limited.
  void set_max_inflight_requests(int64_t n) { max_inflight_ = n; }
  // Most pulls, and most pushes, one caller may have in flight here
  // (DataCaller.key: the certificate's task when TLS names one, else the
  // caller's token and connection; never the worker id a request names). A caller over it is refused with RESOURCE_EXHAUSTED naming
  // --max_inflight_per_caller while the others are still served: one
  // flooding worker cannot take every slot of --max_inflight_requests.
  void set_max_inflight_per_caller(int64_t n) { max_per_caller_ = n; }
  // An Exchange stream that stopped reading for its caller's unread answers
  // is cancelled once none is written for this long (ps_exchange.h;
  // --exchange_write_timeout_s). <= 0: never.
  void set_exchange_write_timeout(absl::Duration d) { exchange_write_timeout_ = d; }
  // Bytes of pull answers one caller may have made and not yet read (held
  // until written to it); a pull whose answer would pass it is answered
  // RESOURCE_EXHAUSTED naming --max_unread_answer_mb instead. A caller with
  // none unread always gets its answer, however large.
  void set_max_unread_answer_bytes(int64_t n) { max_unread_answer_bytes_ = n; }
  // ...and over every caller together (--max_unread_answers_total_mb): each
  // caller of the data plane's TCP connections is its connection, so
  // without it a token holder's N connections could leave N times the
  // bound unread. A caller with none unread still always gets one answer.
  void set_max_unread_answer_total_bytes(int64_t n) { max_unread_answer_total_bytes_ = n; }
  // Replicated shards (replica_router.h): requests naming a store and
  // placement epoch go to that store's core; pushes are forwarded to the
  // backup. Not owned; unset = every request to the one core (set before
  // the server starts).
  void set_router(ReplicaRouter* router) { router_ = router; }
  // The TCP data plane that OpenDataPlane issues tickets for; not owned.
  // Unset: OpenDataPlane answers port 0 (callers stay on gRPC).
  void set_tcp_server(PsTcpServer* tcp) { tcp_ = tcp; }
  // Counts every data call (however it arrived) and each push's apply into
  // `metrics` (ps_metrics.h); unset: nothing is counted (set before the
  // server starts). Shared: a parked pull's answer may come after this
  // object is gone.
  void set_metrics(std::shared_ptr<PsMetrics> metrics) { metrics_ = std::move(metrics); }

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* PullRows(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* PushRows(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  // The same four methods as frames of one long-lived stream (ps_exchange.h).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Exchange(grpc::CallbackServerContext* ctx) override;

  // One data-path call, however it arrived: authorised against `ctx`,
  // checked, served; `done` runs exactly once, on any thread (a SYNC pull
  // parks until its step or `deadline`). Its `hold` (may be null) holds the
  // call's in-flight slots: the transport keeps it until the answer is
  // written to the caller or dropped, so answers a caller does not read
  // count against --max_inflight_per_caller and --max_inflight_requests.
  using DataDone = std::function<void(grpc::Status, grpc::ByteBuffer, std::shared_ptr<void> hold)>;
  void ServeData(const grpc::ServerContextBase& ctx, psframe::Method method, const grpc::ByteBuffer& req,
                 absl::Time deadline, DataDone done);
  // The same for a caller its transport identified already.
  void ServeDataAs(const DataCaller& who, psframe::Method method, const grpc::ByteBuffer& req, absl::Time deadline,
                   DataDone done);
  grpc::ServerUnaryReactor* OpenDataPlane(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                          grpc::ByteBuffer* resp) override;

  // The control methods as gRPC calls them (raw bytes, parsed here)...
  grpc::ServerUnaryReactor* CreateVariables(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                            grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Snapshot(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                    grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* MoveVariables(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                         grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                   grpc::ByteBuffer* resp) override;
  // ...and parsed, as in-process callers (benchmarks, fuzzers) use them.
  grpc::Status CreateVariables(grpc::ServerContextBase* ctx, const CreateVariablesRequest* req,
                               CreateVariablesResponse* resp);
  grpc::Status Snapshot(grpc::ServerContextBase* ctx, const SnapshotRequest* req, SnapshotResponse* resp);
  grpc::Status Restore(grpc::ServerContextBase* ctx, const RestoreRequest* req, RestoreResponse* resp);
  grpc::Status Status(grpc::ServerContextBase* ctx, const PsStatusRequest* req, PsStatusResponse* resp);

 private:
  template <typename Decode, typename Issue>
  void ServePull(const DataCaller& who, const grpc::ByteBuffer& req, absl::Time deadline, Rpc rpc,
                 const char* method, Decode decode, Issue issue, DataDone done);
  void ServePush(const DataCaller& who, const grpc::ByteBuffer& req, DataDone done);
  void ServePushRows(const DataCaller& who, const grpc::ByteBuffer& req, DataDone done);
  // `who` may call `rpc`: its identification's error, or the role check's.
  static grpc::Status Permit(const DataCaller& who, Rpc rpc);
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, psframe::Method method,
                                  const grpc::ByteBuffer* req, grpc::ByteBuffer* resp);
  // The core a call is for (the one core without a router).
  absl::StatusOr<ParameterServerCore*> CoreFor(const grpc::ServerContextBase& ctx, bool control);
  absl::StatusOr<ParameterServerCore*> CoreFor(const absl::StatusOr<ReplicaHeader>& header, bool control);
  ParameterServerCore* const core_;
  ReplicaRouter* router_ = nullptr;
  PsTcpServer* tcp_ = nullptr;
  RequestAuthenticator auth_;
  std::shared_ptr<PsMetrics> metrics_;  // may be null
  int64_t max_inflight_ = 4096;
  int64_t max_per_caller_ = 1024;
  absl::Duration exchange_write_timeout_ = absl::Seconds(30);
  int64_t max_unread_answer_bytes_ = int64_t{1} << 30;
  int64_t max_unread_answer_total_bytes_ = int64_t{2} << 30;
  // Shared with parked pulls' callbacks, which may outlive this object.
  std::shared_ptr<std::atomic<int64_t>> pulls_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> pushes_ = std::make_shared<std::atomic<int64_t>>(0);
  // In-flight calls by caller, pulls and pushes apart (as above).
  std::shared_ptr<CallerCounts> pull_callers_ = std::make_shared<CallerCounts>();
  std::shared_ptr<CallerCounts> push_callers_ = std::make_shared<CallerCounts>();
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PS_SERVICE_H_
