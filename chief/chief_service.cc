#include "chief/chief_service.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/parsed_unary.h"
#include "common/rpc/status_util.h"
#include "glog/logging.h"

namespace psrt {
namespace {

// How much of a peer's failure text is kept: enough to diagnose.
constexpr size_t kMaxReportedError = 2048;

grpc::Status Denied(const Caller& caller, absl::string_view what, const TaskId& task) {
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(caller.name, " (role ", caller.RolesText(), ") may not ", what, " for ",
                                   TaskName(task), ": only that task may"));
}

}  // namespace

grpc::ServerUnaryReactor* ChiefServiceImpl::Register(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<RegisterRequest, RegisterResponse>(
      ctx, req, resp, "Register", [&] { return auth_.Authorize(*ctx, Rpc::kChiefRegister); },
      [&](const RegisterRequest& r, RegisterResponse* out) { return Register(ctx, &r, out); });
}

grpc::ServerUnaryReactor* ChiefServiceImpl::Heartbeat(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<HeartbeatRequest, HeartbeatResponse>(
      ctx, req, resp, "Heartbeat", [&] { return auth_.Authorize(*ctx, Rpc::kChiefHeartbeat); },
      [&](const HeartbeatRequest& r, HeartbeatResponse* out) { return Heartbeat(ctx, &r, out); });
}

grpc::ServerUnaryReactor* ChiefServiceImpl::ReportFailure(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<ReportFailureRequest, ReportFailureResponse>(
      ctx, req, resp, "ReportFailure", [&] { return auth_.Authorize(*ctx, Rpc::kChiefReportFailure); },
      [&](const ReportFailureRequest& r, ReportFailureResponse* out) { return ReportFailure(ctx, &r, out); });
}

grpc::ServerUnaryReactor* ChiefServiceImpl::JobStatus(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
    grpc::ByteBuffer* resp) {
  return ServeParsed<JobStatusRequest, JobStatusResponse>(
      ctx, req, resp, "JobStatus", [&] { return auth_.Authorize(*ctx, Rpc::kChiefJobStatus); },
      [&](const JobStatusRequest& r, JobStatusResponse* out) { return JobStatus(ctx, &r, out); });
}

std::string PrintableText(absl::string_view text, size_t max_bytes) {
  std::string out = absl::CHexEscape(text.substr(0, max_bytes));
  if (text.size() > max_bytes) absl::StrAppend(&out, "... (", text.size() - max_bytes, " more bytes)");
  return out;
}

grpc::Status ChiefServiceImpl::Register(grpc::ServerContextBase* ctx, const RegisterRequest* req,
                                        RegisterResponse* resp) {
  Caller caller;
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kChiefRegister, &caller); !a.ok()) return a;
  if (!caller.MayActFor(req->task().task().job(), req->task().task().index())) {
    return Denied(caller, "register", req->task().task());
  }
  if (identity_.has_value()) {
    if (req->has_job()) {
      absl::Status same = CheckSameJob(*identity_, req->job(), req->task().task());
      if (!same.ok()) {
        LOG(WARNING) << "refused a registration: " << same.message();
        return ToGrpcStatus(same);
      }
    } else {
      LOG(WARNING) << PrintableText(TaskName(req->task().task()), 64)
                   << " registers without a job identity (a psrt older than RegisterRequest.job): "
                      "its job name and cluster spec are not checked";
    }
  }
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

grpc::Status ChiefServiceImpl::Heartbeat(grpc::ServerContextBase* ctx, const HeartbeatRequest* req,
                                         HeartbeatResponse* resp) {
  Caller caller;
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kChiefHeartbeat, &caller); !a.ok()) return a;
  if (!caller.MayActFor(req->task().job(), req->task().index())) return Denied(caller, "heartbeat", req->task());
  absl::Status s = registry_->Heartbeat(*req);
  if (s.code() == absl::StatusCode::kAborted) {
    resp->set_command(HeartbeatResponse::REREGISTER);
    return grpc::Status::OK;
  }
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_command(command_for ? command_for(req->task()) : HeartbeatResponse::CONTINUE);
  return grpc::Status::OK;
}

grpc::Status ChiefServiceImpl::ReportFailure(grpc::ServerContextBase* ctx, const ReportFailureRequest* req,
                                             ReportFailureResponse*) {
  Caller caller;
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kChiefReportFailure, &caller); !a.ok()) return a;
  if (!caller.MayActFor(req->reporter().job(), req->reporter().index())) {
    return Denied(caller, "report failures", req->reporter());
  }
  // Only a registered task, as its current incarnation, is heard: a report
  // makes the chief roll the job back, so a stranger's must not count.
  TaskState reporter = registry_->Get(req->reporter());
  if (reporter.info.incarnation() == 0 || reporter.info.incarnation() != req->reporter_incarnation()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("ReportFailure: reporter ", PrintableText(TaskName(req->reporter()), 64),
                                     " is not registered with reporter_incarnation ",
                                     absl::Hex(req->reporter_incarnation())));
  }
  // The text is the peer's: escaped so it cannot forge log lines or markup
  // further on (the coordinator shows it in JobStatus and on the page).
  ReportFailureRequest clean = *req;
  clean.set_error(PrintableText(req->error(), kMaxReportedError));
  LOG(WARNING) << TaskName(clean.reporter()) << " reports a failure at step " << clean.step() << ": \"" << clean.error() << "\"";
  if (on_failure) on_failure(clean);
  return grpc::Status::OK;
}

grpc::Status ChiefServiceImpl::JobStatus(grpc::ServerContextBase* ctx, const JobStatusRequest*,
                                         JobStatusResponse* resp) {
  Caller caller;
  if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kChiefJobStatus, &caller); !a.ok()) return a;
  if (job_status) *resp = job_status();
  // An incarnation is what a heartbeat proves itself with: only the chief's
  // own identity (its certificate or token) sees them; everyone else,
  // including every caller of a cluster without roles, sees 0.
  const bool show_incarnations = caller.Has(Role::kChief) && !caller.EveryRole();
  for (const TaskState& t : registry_->All()) {
    TaskInfo* info = resp->add_task();
    *info = t.info;
    if (!show_incarnations) info->clear_incarnation();
  }
  return grpc::Status::OK;
}

}  // namespace psrt
