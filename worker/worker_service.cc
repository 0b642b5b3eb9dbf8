#include "worker/worker_service.h"

#include "common/rpc/status_util.h"

namespace psrt {

grpc::Status WorkerServiceImpl::Start(grpc::ServerContext*, const StartRequest* req,
                                      StartResponse*) {
  return ToGrpcStatus(worker_->Start(req->assignment()));
}

grpc::Status WorkerServiceImpl::Pause(grpc::ServerContext*, const PauseRequest* req,
                                      PauseResponse* resp) {
  absl::StatusOr<int64_t> step = worker_->Pause(req->generation(), absl::Seconds(30));
  if (!step.ok()) return ToGrpcStatus(step.status());
  resp->set_step(*step);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Resume(grpc::ServerContext*, const ResumeRequest* req,
                                       ResumeResponse*) {
  return ToGrpcStatus(worker_->Resume(req->start_step(), req->generation()));
}

grpc::Status WorkerServiceImpl::Status(grpc::ServerContext*, const WorkerStatusRequest*,
                                       WorkerStatusResponse* resp) {
  *resp = worker_->Status();
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Shutdown(grpc::ServerContext*, const ShutdownRequest*,
                                         ShutdownResponse*) {
  worker_->Shutdown();
  if (on_shutdown_) on_shutdown_();
  return grpc::Status::OK;
}

}  // namespace psrt
