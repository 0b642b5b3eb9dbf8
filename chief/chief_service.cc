#include "chief/chief_service.h"

#include "common/rpc/status_util.h"
#include "glog/logging.h"

namespace psrt {

grpc::Status ChiefServiceImpl::Register(grpc::ServerContext* ctx, const RegisterRequest* req,
                                        RegisterResponse* resp) {
  if (grpc::Status a = auth_.Check(*ctx); !a.ok()) return a;
  absl::StatusOr<TaskRegistry::Registration> r = registry_->Register(req->task());
  if (!r.ok()) return ToGrpcStatus(r.status());
  if (*r != TaskRegistry::Registration::kAgain) {
    LOG(INFO) << TaskName(req->task().task())
              << (*r == TaskRegistry::Registration::kFirst ? " registered" : " restarted")
              << " (incarnation " << std::hex << req->task().incarnation() << ")";
  }
  if (on_register) on_register(req->task(), *r);
  resp->set_chief_incarnation(incarnation_);
  return grpc::Status::OK;
}

grpc::Status ChiefServiceImpl::Heartbeat(grpc::ServerContext* ctx, const HeartbeatRequest* req,
                                         HeartbeatResponse* resp) {
  if (grpc::Status a = auth_.Check(*ctx); !a.ok()) return a;
  absl::Status s = registry_->Heartbeat(*req);
  if (s.code() == absl::StatusCode::kAborted) {
    resp->set_command(HeartbeatResponse::REREGISTER);
    return grpc::Status::OK;
  }
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_command(command_for ? command_for(req->task()) : HeartbeatResponse::CONTINUE);
  return grpc::Status::OK;
}

grpc::Status ChiefServiceImpl::ReportFailure(grpc::ServerContext* ctx, const ReportFailureRequest* req,
                                             ReportFailureResponse*) {
  if (grpc::Status a = auth_.Check(*ctx); !a.ok()) return a;
  LOG(WARNING) << TaskName(req->reporter()) << " reports a failure at step " << req->step() << ": "
               << req->error();
  if (on_failure) on_failure(*req);
  return grpc::Status::OK;
}

grpc::Status ChiefServiceImpl::JobStatus(grpc::ServerContext* ctx, const JobStatusRequest*,
                                         JobStatusResponse* resp) {
  if (grpc::Status a = auth_.Check(*ctx); !a.ok()) return a;
  if (job_status) *resp = job_status();
  for (const TaskState& t : registry_->All()) *resp->add_task() = t.info;
  return grpc::Status::OK;
}

}  // namespace psrt
