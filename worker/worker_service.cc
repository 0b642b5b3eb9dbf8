#include "worker/worker_service.h"

#include "common/rpc/status_util.h"

namespace psrt {

grpc::Status WorkerServiceImpl::Start(grpc::ServerContext* ctx, const StartRequest* req,
                                      StartResponse*) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerStart); !a.ok()) return a;
  if (absl::Status v = ValidateAssignment(req->assignment(), limits_); !v.ok()) return ToGrpcStatus(v);
  return ToGrpcStatus(worker_->Start(req->assignment()));
}

grpc::Status WorkerServiceImpl::Pause(grpc::ServerContext* ctx, const PauseRequest* req,
                                      PauseResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerPause); !a.ok()) return a;
  absl::StatusOr<int64_t> step = worker_->Pause(req->generation(), absl::Seconds(30));
  if (!step.ok()) return ToGrpcStatus(step.status());
  resp->set_step(*step);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Resume(grpc::ServerContext* ctx, const ResumeRequest* req,
                                       ResumeResponse*) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerResume); !a.ok()) return a;
  return ToGrpcStatus(worker_->Resume(req->start_step(), req->generation()));
}

grpc::Status WorkerServiceImpl::Status(grpc::ServerContext* ctx, const WorkerStatusRequest*,
                                       WorkerStatusResponse* resp) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerStatus); !a.ok()) return a;
  *resp = worker_->Status();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Shutdown(grpc::ServerContext* ctx, const ShutdownRequest*,
                                         ShutdownResponse*) {
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kWorkerShutdown); !a.ok()) return a;
  worker_->Shutdown();
  if (on_shutdown_) on_shutdown_();
  return grpc::Status::OK;
}

}  // namespace psrt
