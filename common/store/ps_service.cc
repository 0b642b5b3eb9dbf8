#include "common/store/ps_service.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/parsed_unary.h"
#include "common/rpc/status_util.h"
#include "common/status_macros.h"
#include "common/store/ps_exchange.h"
#include "common/store/ps_tcp_server.h"
#include "common/transport/ps_wire.h"

namespace psrt {
namespace {

// How long a pull may wait for its step when the caller set no deadline.
constexpr absl::Duration kMaxPullWait = absl::Seconds(60);

absl::Time PullDeadline(grpc::CallbackServerContext* ctx) {
  absl::Time cap = absl::Now() + kMaxPullWait;
  absl::Time d = absl::FromChrono(ctx->deadline());
  return std::min(d, cap);
}

absl::Status CheckSize(const grpc::ByteBuffer* req, int64_t limit, absl::string_view method) {
  if (static_cast<int64_t>(req->Length()) > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(method, " request of ", req->Length(),
                                                     " bytes is over the limit of ", limit));
  }
  return absl::OkStatus();
}

// Holds one of the service's in-flight slots while it lives.
class InflightSlot {
 public:
  InflightSlot(std::shared_ptr<std::atomic<int64_t>> counter, int64_t limit) : counter_(std::move(counter)) {
    if (counter_->fetch_add(1) >= limit) {
      counter_->fetch_sub(1);
      counter_ = nullptr;
    }
  }
  ~InflightSlot() { if (counter_ != nullptr) counter_->fetch_sub(1); }
  InflightSlot(InflightSlot&& o) noexcept : counter_(std::move(o.counter_)) {}
  bool held() const { return counter_ != nullptr; }

 private:
  std::shared_ptr<std::atomic<int64_t>> counter_;
};

// Holds one of a caller's in-flight slots while it lives.
class CallerSlot {
 public:
  CallerSlot(std::shared_ptr<CallerCounts> counts, std::string caller, int64_t limit)
      : counts_(std::move(counts)), caller_(std::move(caller)) {
    absl::MutexLock lock(&counts_->mu);
    int64_t& n = counts_->in_flight[caller_];
    if (n >= limit) {
      if (n == 0) counts_->in_flight.erase(caller_);
      counts_ = nullptr;
      return;
    }
    ++n;
  }
  ~CallerSlot() {
    if (counts_ == nullptr) return;
    absl::MutexLock lock(&counts_->mu);
    auto it = counts_->in_flight.find(caller_);
    if (--it->second == 0) counts_->in_flight.erase(it);
  }
  CallerSlot(CallerSlot&& o) noexcept : counts_(std::move(o.counts_)), caller_(std::move(o.caller_)) {}
  bool held() const { return counts_ != nullptr; }
  const std::string& caller() const { return caller_; }

 private:
  std::shared_ptr<CallerCounts> counts_;
  std::string caller_;
};

// Bytes of a caller's answers not yet written, held while it lives.
class AnswerBytes {
 public:
  // Null when `bytes` more would pass the caller's `limit`, or every
  // caller's `total_limit`, and the caller has some already (one answer,
  // however large, always goes).
  static std::shared_ptr<AnswerBytes> Acquire(std::shared_ptr<CallerCounts> counts, const std::string& caller,
                                              int64_t bytes, int64_t limit, int64_t total_limit, int64_t* held,
                                              int64_t* total) {
    absl::MutexLock lock(&counts->mu);
    int64_t& n = counts->answer_bytes[caller];
    *held = n;
    *total = counts->total_answer_bytes;
    if (n > 0 && (n + bytes > limit || counts->total_answer_bytes + bytes > total_limit)) return nullptr;
    if (bytes == 0) {
      if (n == 0) counts->answer_bytes.erase(caller);
      return nullptr;
    }
    n += bytes;
    counts->total_answer_bytes += bytes;
    return std::shared_ptr<AnswerBytes>(new AnswerBytes(std::move(counts), caller, bytes));
  }
  ~AnswerBytes() {
    absl::MutexLock lock(&counts_->mu);
    auto it = counts_->answer_bytes.find(caller_);
    if ((it->second -= bytes_) == 0) counts_->answer_bytes.erase(it);
    counts_->total_answer_bytes -= bytes_;
  }

 private:
  AnswerBytes(std::shared_ptr<CallerCounts> counts, std::string caller, int64_t bytes)
      : counts_(std::move(counts)), caller_(std::move(caller)), bytes_(bytes) {}
  std::shared_ptr<CallerCounts> counts_;
  const std::string caller_;
  const int64_t bytes_;
};

// A call's slots, kept by its answer until the answer is written to the
// caller (or dropped): answers a caller does not read count against its
// in-flight limits like calls still being served.
std::shared_ptr<void> HoldSlots(InflightSlot slot, CallerSlot mine) {
  return std::make_shared<std::pair<InflightSlot, CallerSlot>>(std::move(slot), std::move(mine));
}

// Who a data-path call counts against (IdentityKey), never the worker id
// the request names.
std::string CallerKey(const DataCaller& who) { return who.key.empty() ? who.caller.name : who.key; }

// "ipv4:10.0.0.5:41234" -> "ipv4:10.0.0.5": a caller's address without its
// port, for what a caller could otherwise renew by reconnecting.
std::string WithoutPort(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t bracket = peer.rfind(']');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket) || colon < 5) return peer;
  return peer.substr(0, colon);
}

absl::Status CallerBusy(absl::string_view method, const CallerSlot& slot, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      method, " refused: ", slot.caller(), " already has ", limit, " ",
      absl::StartsWith(method, "Pull") ? "pulls" : "pushes",
      " in flight on this PS (--max_inflight_per_caller); retry later"));
}

absl::Status Busy(absl::string_view method, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      method, " refused: the PS is already serving ", limit, " ",
      absl::StartsWith(method, "Pull") ? "pulls" : "pushes", " (--max_inflight_requests); retry later"));
}

// `apply()`, its time observed in `metrics` (may be null).
template <typename Apply>
absl::StatusOr<PushResponse> TimedApply(PsMetrics* metrics, Apply apply) {
  if (metrics == nullptr) return apply();
  const absl::Time start = absl::Now();
  absl::StatusOr<PushResponse> r = apply();
  metrics->apply.Observe(absl::Now() - start);
  return r;
}

// A push's rows first, as a PushRows of the same id would be (its own
// retry record), then the dense part.
absl::StatusOr<PushResponse> ApplyPush(ParameterServerCore* core, const pswire::PushArgs& args) {
  if (!args.rows.empty()) {
    absl::StatusOr<PushResponse> rows = core->PushRows(args.id, args.rows);
    if (!rows.ok()) return rows.status();
  }
  absl::StatusOr<PushResponse> r = core->Push(args.id, args.gradients);
  if (r.ok()) r->set_rows_taken(!args.rows.empty());
  return r;
}

}  // namespace

std::string IdentityKey(const Caller& caller, absl::string_view where) {
  if (caller.index >= 0) return caller.name;
  return absl::StrCat(caller.name, " from ", where);
}

absl::StatusOr<ParameterServerCore*> PsServiceImpl::CoreFor(const grpc::ServerContextBase& ctx, bool control) {
  if (router_ == nullptr) return core_;
  return CoreFor(ReadReplicaHeader(ctx), control);
}

absl::StatusOr<ParameterServerCore*> PsServiceImpl::CoreFor(const absl::StatusOr<ReplicaHeader>& header,
                                                            bool control) {
  if (router_ == nullptr) return core_;
  if (!header.ok()) return header.status();
  return router_->Resolve(*header, control);
}

grpc::Status PsServiceImpl::Permit(const DataCaller& who, Rpc rpc) {
  if (!who.identified.ok()) return who.identified;
  return RequestAuthenticator::Permit(who.caller, rpc);
}

// Pull and PullRows: the same checks in the same order, then the core's
// pull of variables or of rows, answered from its callback.
template <typename Decode, typename Issue>
void PsServiceImpl::ServePull(const DataCaller& who, const grpc::ByteBuffer& req, absl::Time deadline, Rpc rpc,
                              const char* method, Decode decode, Issue issue, DataDone done) {
  if (grpc::Status a = Permit(who, rpc); !a.ok()) return done(a, {}, nullptr);
  InflightSlot slot(pulls_, max_inflight_);
  if (!slot.held()) return done(ToGrpcStatus(Busy(method, max_inflight_)), {}, nullptr);
  if (auto s = CheckSize(&req, core_->max_request_bytes(), method); !s.ok()) return done(ToGrpcStatus(s), {}, nullptr);
  absl::StatusOr<ParameterServerCore*> core = CoreFor(who.header, false);
  if (!core.ok()) return done(ToGrpcStatus(core.status()), {}, nullptr);
  auto args = decode(req);
  if (!args.ok()) return done(ToGrpcStatus(args.status()), {}, nullptr);
  CallerSlot mine(pull_callers_, CallerKey(who), max_per_caller_);
  if (!mine.held()) return done(ToGrpcStatus(CallerBusy(method, mine, max_per_caller_)), {}, nullptr);
  if (auto g = (*core)->CheckGeneration(args->generation, "pull"); !g.ok()) return done(ToGrpcStatus(g), {}, nullptr);
  uint64_t incarnation = core_->incarnation();
  const std::string key = mine.caller();
  issue(*core, *std::move(args), deadline,
        [done = std::move(done), incarnation, method, key, counts = pull_callers_, limit = max_unread_answer_bytes_,
         total_limit = max_unread_answer_total_bytes_,
         hold = HoldSlots(std::move(slot), std::move(mine))](absl::Status s, NamedTensors t, int64_t gs) mutable {
          grpc::ByteBuffer resp;
          if (s.ok()) resp = pswire::EncodePullResult({std::move(t), gs, incarnation});
          // The answer's bytes count against its caller until written:
          // a caller that does not read its answers cannot pile them up.
          int64_t unread = 0, total = 0;
          std::shared_ptr<AnswerBytes> bytes = AnswerBytes::Acquire(
              counts, key, static_cast<int64_t>(resp.Length()), limit, total_limit, &unread, &total);
          if (bytes == nullptr && resp.Length() > 0) {
            const bool own = unread + static_cast<int64_t>(resp.Length()) > limit;
            return done(ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
                            method, " refused: ", key, " has ", unread, " bytes of answers it has not read",
                            own ? "" : absl::StrCat(" (every caller ", total, ")"), "; this one's ", resp.Length(),
                            " would pass the bound of ", own ? limit : total_limit,
                            own ? " (--max_unread_answer_mb)" : " (--max_unread_answers_total_mb)"))),
                        {}, std::move(hold));
          }
          done(ToGrpcStatus(s), std::move(resp),  // held until written
               std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<AnswerBytes>>>(std::move(hold),
                                                                                                std::move(bytes)));
        });
}

void PsServiceImpl::ServePush(const DataCaller& who, const grpc::ByteBuffer& req, DataDone done) {
  const absl::StatusOr<ReplicaHeader>& header = who.header;
  if (!header.ok()) return done(ToGrpcStatus(header.status()), {}, nullptr);
  // A primary's forward to its backup is a PS's call, not a worker's.
  const Rpc rpc = header->replica ? Rpc::kPsReplicate : Rpc::kPsPush;
  if (grpc::Status a = Permit(who, rpc); !a.ok()) return done(a, {}, nullptr);
  InflightSlot slot(pushes_, max_inflight_);
  if (!slot.held()) return done(ToGrpcStatus(Busy("Push", max_inflight_)), {}, nullptr);
  if (auto s = CheckSize(&req, core_->max_request_bytes(), "Push"); !s.ok()) return done(ToGrpcStatus(s), {}, nullptr);
  absl::StatusOr<pswire::PushArgs> args = pswire::DecodePush(req, core_->pool()->Allocator(), /*adopt_aligned=*/true);
  if (!args.ok()) return done(ToGrpcStatus(args.status()), {}, nullptr);
  CallerSlot mine(push_callers_, CallerKey(who), max_per_caller_);
  if (!mine.held()) return done(ToGrpcStatus(CallerBusy("Push", mine, max_per_caller_)), {}, nullptr);
  if (router_ == nullptr) {
    absl::StatusOr<PushResponse> r = TimedApply(metrics_.get(), [&] { return ApplyPush(core_, *args); });
    grpc::ByteBuffer resp;
    if (r.ok()) resp = pswire::EncodePushResult(*r);
    return done(ToGrpcStatus(r.status()), std::move(resp), HoldSlots(std::move(slot), std::move(mine)));
  }
  // The router may answer later, from a store's thread (a primary waits
  // for its backup): the slots, the request's bytes (a frame's payload
  // lives only as long as this call) and the args are held until then.
  auto pushed = std::make_shared<pswire::PushArgs>(*std::move(args));
  auto raw = std::make_shared<grpc::ByteBuffer>(req);  // slice references, not a copy of the bytes
  router_->Push(
      *header, raw.get(),
      [pushed, metrics = metrics_](ParameterServerCore* core) {
        return TimedApply(metrics.get(), [&] { return ApplyPush(core, *pushed); });
      },
      [done = std::move(done), raw, hold = HoldSlots(std::move(slot), std::move(mine))](
          absl::StatusOr<PushResponse> r) mutable {
        grpc::ByteBuffer resp;
        if (r.ok()) resp = pswire::EncodePushResult(*r);
        done(ToGrpcStatus(r.status()), std::move(resp), std::move(hold));
      });
}

void PsServiceImpl::ServePushRows(const DataCaller& who, const grpc::ByteBuffer& req, DataDone done) {
  if (grpc::Status a = Permit(who, Rpc::kPsPushRows); !a.ok()) return done(a, {}, nullptr);
  InflightSlot slot(pushes_, max_inflight_);
  if (!slot.held()) return done(ToGrpcStatus(Busy("PushRows", max_inflight_)), {}, nullptr);
  if (auto s = CheckSize(&req, core_->max_request_bytes(), "PushRows"); !s.ok()) return done(ToGrpcStatus(s), {}, nullptr);
  absl::StatusOr<pswire::PushRowsArgs> args = pswire::DecodePushRows(req);
  if (!args.ok()) return done(ToGrpcStatus(args.status()), {}, nullptr);
  CallerSlot mine(push_callers_, CallerKey(who), max_per_caller_);
  if (!mine.held()) return done(ToGrpcStatus(CallerBusy("PushRows", mine, max_per_caller_)), {}, nullptr);
  if (router_ != nullptr && router_->epoch() > 0) {
    return done(ToGrpcStatus(absl::FailedPreconditionError(
                    "PushRows is not replicated: with job.replication, rows travel in Push")),
                {}, nullptr);
  }
  absl::StatusOr<PushResponse> r = TimedApply(metrics_.get(), [&] { return core_->PushRows(args->id, args->rows); });
  grpc::ByteBuffer resp;
  if (r.ok()) resp = pswire::EncodePushResult(*r);
  done(ToGrpcStatus(r.status()), std::move(resp), HoldSlots(std::move(slot), std::move(mine)));
}

void PsServiceImpl::ServeData(const grpc::ServerContextBase& ctx, psframe::Method method,
                              const grpc::ByteBuffer& req, absl::Time deadline, DataDone done) {
  DataCaller who;
  who.identified = auth_.Identify(ctx, &who.caller);
  who.key = IdentityKey(who.caller, ctx.peer());
  if (router_ != nullptr) who.header = ReadReplicaHeader(ctx);
  ServeDataAs(who, method, req, deadline, std::move(done));
}

void PsServiceImpl::ServeDataAs(const DataCaller& who, psframe::Method method, const grpc::ByteBuffer& req,
                                absl::Time deadline, DataDone done) {
  if (metrics_ != nullptr) {
    // Counted when answered, whatever the path: bytes of a pull's answer,
    // of a push's request.
    const bool pull = method == psframe::Method::kPull || method == psframe::Method::kPullRows;
    CallStats* stats = metrics_->For(method, who.header.ok() && who.header->replica);
    done = [stats, metrics = metrics_, pulled = !pull ? static_cast<int64_t>(req.Length()) : -1,
            start = absl::Now(), done = std::move(done)](grpc::Status s, grpc::ByteBuffer b,
                                                         std::shared_ptr<void> hold) {
      stats->Record(s.ok(), pulled >= 0 ? pulled : static_cast<int64_t>(b.Length()), absl::Now() - start);
      done(std::move(s), std::move(b), std::move(hold));
    };
  }
  switch (method) {
    case psframe::Method::kPull:
      return ServePull(who, req, deadline, Rpc::kPsPull, "Pull", pswire::DecodePull,
                       [](ParameterServerCore* core, pswire::PullArgs args, absl::Time deadline,
                          ParameterServerCore::PullDone done) {
                         core->Pull(std::move(args.variables), args.worker, args.step, deadline, std::move(done));
                       },
                       std::move(done));
    case psframe::Method::kPullRows:
      return ServePull(who, req, deadline, Rpc::kPsPullRows, "PullRows", pswire::DecodePullRows,
                       [](ParameterServerCore* core, pswire::PullRowsArgs args, absl::Time deadline,
                          ParameterServerCore::PullDone done) {
                         core->PullRows(std::move(args.ids), args.worker, args.step, deadline, std::move(done),
                                         args.read_only);
                       },
                       std::move(done));
    case psframe::Method::kPush:
      return ServePush(who, req, std::move(done));
    case psframe::Method::kPushRows:
      return ServePushRows(who, req, std::move(done));
  }
  done(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown data method"), {}, nullptr);
}

grpc::ServerUnaryReactor* PsServiceImpl::Unary(grpc::CallbackServerContext* ctx, psframe::Method method,
                                               const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  // Keeps the call's slots until gRPC is done with its answer.
  class HoldingReactor : public grpc::ServerUnaryReactor {
   public:
    std::shared_ptr<void> hold;
    void OnDone() override { delete this; }
  };
  auto* reactor = new HoldingReactor;
  ServeData(*ctx, method, *req, PullDeadline(ctx),
            [reactor, resp](grpc::Status s, grpc::ByteBuffer b, std::shared_ptr<void> hold) {
              if (s.ok()) *resp = std::move(b);
              reactor->hold = std::move(hold);
              reactor->Finish(s);
            });
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Pull(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                              grpc::ByteBuffer* resp) {
  return Unary(ctx, psframe::Method::kPull, req, resp);
}

grpc::ServerUnaryReactor* PsServiceImpl::PullRows(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                  grpc::ByteBuffer* resp) {
  return Unary(ctx, psframe::Method::kPullRows, req, resp);
}

grpc::ServerUnaryReactor* PsServiceImpl::Push(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                              grpc::ByteBuffer* resp) {
  return Unary(ctx, psframe::Method::kPush, req, resp);
}

grpc::ServerUnaryReactor* PsServiceImpl::PushRows(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                                  grpc::ByteBuffer* resp) {
  return Unary(ctx, psframe::Method::kPushRows, req, resp);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PsServiceImpl::Exchange(grpc::CallbackServerContext* ctx) {
  return NewExchangeReactor(this, ctx, exchange_write_timeout_);
}

grpc::ServerUnaryReactor* PsServiceImpl::OpenDataPlane(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  Caller caller;  // the ticket carries who this is
  return ServeParsed<OpenDataPlaneRequest, OpenDataPlaneResponse>(
      ctx, req, resp, "OpenDataPlane", [&] { return auth_.Authorize(*ctx, Rpc::kPsOpenDataPlane, &caller); },
      [&](const OpenDataPlaneRequest&, OpenDataPlaneResponse* out) {
        if (tcp_ == nullptr) return grpc::Status::OK;  // port 0: none offered
        absl::StatusOr<PsTcpServer::Ticket> t = tcp_->IssueTicket(caller, IdentityKey(caller, WithoutPort(ctx->peer())));
        if (!t.ok()) return ToGrpcStatus(t.status());
        out->set_port(tcp_->port());
        out->set_ticket(t->bytes);
        out->set_ticket_ttl_ms(absl::ToInt64Milliseconds(t->ttl));
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* PsServiceImpl::CreateVariables(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  return ServeParsed<CreateVariablesRequest, CreateVariablesResponse>(
      ctx, req, resp, "CreateVariables", [&] { return auth_.Authorize(*ctx, Rpc::kPsCreateVariables); },
      [&](const CreateVariablesRequest& r, CreateVariablesResponse* out) { return CreateVariables(ctx, &r, out); });
}

grpc::ServerUnaryReactor* PsServiceImpl::Snapshot(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<SnapshotRequest, SnapshotResponse>(
      ctx, req, resp, "Snapshot", [&] { return auth_.Authorize(*ctx, Rpc::kPsSnapshot); },
      [&](const SnapshotRequest& r, SnapshotResponse* out) { return Snapshot(ctx, &r, out); });
}

grpc::ServerUnaryReactor* PsServiceImpl::Restore(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<RestoreRequest, RestoreResponse>(
      ctx, req, resp, "Restore", [&] { return auth_.Authorize(*ctx, Rpc::kPsRestore); },
      [&](const RestoreRequest& r, RestoreResponse* out) { return Restore(ctx, &r, out); });
}

grpc::ServerUnaryReactor* PsServiceImpl::Status(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<PsStatusRequest, PsStatusResponse>(
      ctx, req, resp, "Status", [&] { return auth_.Authorize(*ctx, Rpc::kPsStatus); },
      [&](const PsStatusRequest& r, PsStatusResponse* out) { return Status(ctx, &r, out); });
}

grpc::ServerUnaryReactor* PsServiceImpl::MoveVariables(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  return ServeParsed<MoveVariablesRequest, MoveVariablesResponse>(
      ctx, req, resp, "MoveVariables", [&] { return auth_.Authorize(*ctx, Rpc::kPsMoveVariables); },
      [&](const MoveVariablesRequest& r, MoveVariablesResponse* out) {
        // The PS's own store: moves are refused under replication (the
        // chief does not send them there).
        absl::StatusOr<MoveVariablesResponse> m = core_->MoveVariables(r);
        if (m.ok()) *out = *std::move(m);
        return ToGrpcStatus(m.status());
      });
}

grpc::Status PsServiceImpl::CreateVariables(grpc::ServerContextBase* ctx, const CreateVariablesRequest* req,
                                            CreateVariablesResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kPsCreateVariables); !a.ok()) return a;
  absl::StatusOr<CreateVariablesResponse> r =
      router_ != nullptr ? router_->CreateVariables(*req) : core_->CreateVariables(*req);
  if (r.ok()) *resp = *r;
  return ToGrpcStatus(r.status());
}

grpc::Status PsServiceImpl::Snapshot(grpc::ServerContextBase* ctx, const SnapshotRequest* req,
                                     SnapshotResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kPsSnapshot); !a.ok()) return a;
  absl::StatusOr<ParameterServerCore*> core = CoreFor(*ctx, true);
  if (!core.ok()) return ToGrpcStatus(core.status());
  absl::StatusOr<SnapshotResponse> r = (*core)->Snapshot(*req);
  if (r.ok()) *resp = *r;
  return ToGrpcStatus(r.status());
}

grpc::Status PsServiceImpl::Restore(grpc::ServerContextBase* ctx, const RestoreRequest* req,
                                    RestoreResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kPsRestore); !a.ok()) return a;
  absl::StatusOr<ParameterServerCore*> core = CoreFor(*ctx, true);
  if (!core.ok()) return ToGrpcStatus(core.status());
  absl::StatusOr<RestoreResponse> r = (*core)->Restore(*req);
  if (r.ok()) *resp = *r;
  return ToGrpcStatus(r.status());
}

grpc::Status PsServiceImpl::Status(grpc::ServerContextBase* ctx, const PsStatusRequest*,
                                   PsStatusResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kPsStatus); !a.ok()) return a;
  absl::StatusOr<ParameterServerCore*> core = CoreFor(*ctx, true);
  if (!core.ok()) return ToGrpcStatus(core.status());
  *resp = (*core)->Status();
  if (router_ != nullptr) {
    resp->set_epoch(router_->epoch());
    resp->set_stale_epoch_refused(router_->stale_refused());
  }
  return grpc::Status::OK;
}

}  // namespace psrt
