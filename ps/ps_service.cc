#include "ps/ps_service.h"

#include "absl/strings/str_cat.h"
#include "common/rpc/status_util.h"
#include "ps/ps_wire.h"

namespace psrt {
namespace {

// How long a pull may wait for its step when the caller set no deadline.
constexpr absl::Duration kMaxPullWait = absl::Seconds(60);

absl::Time PullDeadline(grpc::CallbackServerContext* ctx) {
  absl::Time cap = absl::Now() + kMaxPullWait;
  absl::Time d = absl::FromChrono(ctx->deadline());
  return std::min(d, cap);
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(ToGrpcStatus(s));
  return r;
}

absl::Status CheckSize(const grpc::ByteBuffer* req, int64_t limit, absl::string_view method) {
  if (static_cast<int64_t>(req->Length()) > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(method, " request of ", req->Length(),
                                                     " bytes is over the limit of ", limit));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* PsServiceImpl::Pull(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  if (auto s = CheckSize(req, core_->max_request_bytes(), "Pull"); !s.ok()) return Done(ctx, s);
  absl::StatusOr<pswire::PullArgs> args = pswire::DecodePull(*req);
  if (!args.ok()) return Done(ctx, args.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  uint64_t incarnation = core_->incarnation();
  core_->Pull(std::move(args->variables), args->worker, args->step, PullDeadline(ctx),
              [reactor, resp, incarnation](absl::Status s, NamedTensors t, int64_t gs) {
                if (s.ok()) *resp = pswire::EncodePullResult({std::move(t), gs, incarnation});
                reactor->Finish(ToGrpcStatus(s));
              });
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::PullRows(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  if (auto s = CheckSize(req, core_->max_request_bytes(), "PullRows"); !s.ok()) return Done(ctx, s);
  absl::StatusOr<pswire::PullRowsArgs> args = pswire::DecodePullRows(*req);
  if (!args.ok()) return Done(ctx, args.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  uint64_t incarnation = core_->incarnation();
  core_->PullRows(std::move(args->ids), args->worker, args->step, PullDeadline(ctx),
                  [reactor, resp, incarnation](absl::Status s, NamedTensors t, int64_t gs) {
                    if (s.ok()) *resp = pswire::EncodePullResult({std::move(t), gs, incarnation});
                    reactor->Finish(ToGrpcStatus(s));
                  });
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Push(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  if (auto s = CheckSize(req, core_->max_request_bytes(), "Push"); !s.ok()) return Done(ctx, s);
  absl::StatusOr<pswire::PushArgs> args = pswire::DecodePush(*req, core_->pool()->Allocator());
  if (!args.ok()) return Done(ctx, args.status());
  absl::StatusOr<PushResponse> r = core_->Push(args->id, args->gradients);
  if (r.ok()) *resp = pswire::EncodePushResult(*r);
  return Done(ctx, r.status());
}

grpc::ServerUnaryReactor* PsServiceImpl::PushRows(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* req, grpc::ByteBuffer* resp) {
  if (auto s = CheckSize(req, core_->max_request_bytes(), "PushRows"); !s.ok()) return Done(ctx, s);
  absl::StatusOr<pswire::PushRowsArgs> args = pswire::DecodePushRows(*req);
  if (!args.ok()) return Done(ctx, args.status());
  absl::StatusOr<PushResponse> r = core_->PushRows(args->id, args->rows);
  if (r.ok()) *resp = pswire::EncodePushResult(*r);
  return Done(ctx, r.status());
}

grpc::ServerUnaryReactor* PsServiceImpl::CreateVariables(grpc::CallbackServerContext* ctx,
                                                         const CreateVariablesRequest* req,
                                                         CreateVariablesResponse* resp) {
  absl::StatusOr<CreateVariablesResponse> r = core_->CreateVariables(*req);
  if (r.ok()) *resp = *r;
  return Done(ctx, r.status());
}

grpc::ServerUnaryReactor* PsServiceImpl::Snapshot(grpc::CallbackServerContext* ctx,
                                                  const SnapshotRequest* req, SnapshotResponse* resp) {
  absl::StatusOr<SnapshotResponse> r = core_->Snapshot(*req);
  if (r.ok()) *resp = *r;
  return Done(ctx, r.status());
}

grpc::ServerUnaryReactor* PsServiceImpl::Restore(grpc::CallbackServerContext* ctx,
                                                 const RestoreRequest* req, RestoreResponse* resp) {
  absl::StatusOr<RestoreResponse> r = core_->Restore(*req);
  if (r.ok()) *resp = *r;
  return Done(ctx, r.status());
}

grpc::ServerUnaryReactor* PsServiceImpl::Status(grpc::CallbackServerContext* ctx,
                                                const PsStatusRequest*, PsStatusResponse* resp) {
  *resp = core_->Status();
  return Done(ctx, absl::OkStatus());
}

}  // namespace psrt
