#include "worker/worker_service.h"

#include "absl/strings/str_cat.h"
#include "common/rpc/parsed_unary.h"
#include "common/rpc/status_util.h"

namespace psrt {

grpc::ServerUnaryReactor* WorkerServiceImpl::Start(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<StartRequest, StartResponse>(
      ctx, req, resp, "Start", [&] { return auth_.Authorize(*ctx, Rpc::kWorkerStart); },
      [&](const StartRequest& r, StartResponse* out) { return Start(ctx, &r, out); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Pause(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<PauseRequest, PauseResponse>(
      ctx, req, resp, "Pause", [&] { return auth_.Authorize(*ctx, Rpc::kWorkerPause); },
      [&](const PauseRequest& r, PauseResponse* out) { return Pause(ctx, &r, out); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Resume(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<ResumeRequest, ResumeResponse>(
      ctx, req, resp, "Resume", [&] { return auth_.Authorize(*ctx, Rpc::kWorkerResume); },
      [&](const ResumeRequest& r, ResumeResponse* out) { return Resume(ctx, &r, out); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Status(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<WorkerStatusRequest, WorkerStatusResponse>(
      ctx, req, resp, "Status", [&] { return auth_.Authorize(*ctx, Rpc::kWorkerStatus); },
      [&](const WorkerStatusRequest& r, WorkerStatusResponse* out) { return Status(ctx, &r, out); });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Shutdown(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<ShutdownRequest, ShutdownResponse>(
      ctx, req, resp, "Shutdown", [&] { return auth_.Authorize(*ctx, Rpc::kWorkerShutdown); },
      [&](const ShutdownRequest& r, ShutdownResponse* out) { return Shutdown(ctx, &r, out); });
}


grpc::Status WorkerServiceImpl::Start(grpc::ServerContextBase* ctx, const StartRequest* req,
                                      StartResponse*) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerStart); !a.ok()) return a;
  if (absl::Status v = ValidateAssignment(req->assignment(), limits_); !v.ok()) return ToGrpcStatus(v);
  return ToGrpcStatus(worker_->Start(req->assignment()));
}

grpc::Status WorkerServiceImpl::Pause(grpc::ServerContextBase* ctx, const PauseRequest* req,
                                      PauseResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerPause); !a.ok()) return a;
  std::vector<int> abandon;
  for (int ps : req->abandon_ps()) {
    // The client ignores a task it has no channel to: nothing to validate
    // but the sign, and a negative one names no task.
    if (ps < 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("Pause: abandon_ps ", ps, " is negative"));
    }
    abandon.push_back(ps);
  }
  absl::StatusOr<int64_t> step = worker_->Pause(req->generation(), absl::Seconds(30), abandon);
  if (!step.ok()) return ToGrpcStatus(step.status());
  resp->set_step(*step);
  resp->set_incarnation(worker_->incarnation());
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Resume(grpc::ServerContextBase* ctx, const ResumeRequest* req,
                                       ResumeResponse*) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerResume); !a.ok()) return a;
  if (req->end_step() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("Resume: end_step ", req->end_step(), " is negative (0: unchanged)"));
  }
  if (req->has_placement()) {
    // A PS joined or left: the new placement checked as a Start's would be.
    WorkerAssignment a = worker_->assignment();
    *a.mutable_placement() = req->placement();
    *a.mutable_ps() = req->ps();
    if (absl::Status v = ValidateAssignment(a, limits_); !v.ok()) return ToGrpcStatus(v);
    if (absl::Status s = worker_->ReplaceClient(a); !s.ok()) return ToGrpcStatus(s);
  }
  // end_step against the run's own bounds: checked by the runtime, under
  // the lock that guards them (INVALID_ARGUMENT naming it).
  return ToGrpcStatus(worker_->Resume(req->start_step(), req->generation(), req->route(), req->end_step()));
}

grpc::Status WorkerServiceImpl::Status(grpc::ServerContextBase* ctx, const WorkerStatusRequest*,
                                       WorkerStatusResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerStatus); !a.ok()) return a;
  *resp = worker_->Status();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Shutdown(grpc::ServerContextBase* ctx, const ShutdownRequest*,
                                         ShutdownResponse*) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerShutdown); !a.ok()) return a;
  worker_->Shutdown();
  if (on_shutdown_) on_shutdown_();
  return grpc::Status::OK;
}

}  // namespace psrt
