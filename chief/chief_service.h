// The Chief gRPC service: the edge between the network and the chief's
// TaskRegistry and coordinator. Status is converted to gRPC here only.
//
// Handlers run on gRPC's threads; the callbacks they call must be
// thread-safe. Set callbacks before the server starts.
#ifndef PSRT_CHIEF_CHIEF_SERVICE_H_
#define PSRT_CHIEF_CHIEF_SERVICE_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "chief/task_registry.h"
#include "common/job_identity.h"
#include "common/rpc/security.h"
#include "proto/chief_service.grpc.pb.h"

namespace psrt {

// `text` escaped to printable ASCII (C escapes: a newline becomes \n), at
// most `max_bytes` of it, for logs and pages that show a peer's words.
std::string PrintableText(absl::string_view text, size_t max_bytes);

// Who may call what is roles.h's table; besides, Register, Heartbeat and
// ReportFailure are accepted only from the task they name (its certificate,
// or its role's token) and ReportFailure only from a registered incarnation.
// JobStatus shows incarnations to the chief's own identity only.
// Every method is raw and parsed by ServeParsed (common/rpc/parsed_unary.h):
// unparsable bytes get INVALID_ARGUMENT naming the method.
using ChiefServiceBase = Chief::WithRawCallbackMethod_Register<Chief::WithRawCallbackMethod_Heartbeat<
    Chief::WithRawCallbackMethod_ReportFailure<Chief::WithRawCallbackMethod_JobStatus<Chief::Service>>>>;

class ChiefServiceImpl final : public ChiefServiceBase {
 public:
  // `registry` is not owned and must outlive the service.
  ChiefServiceImpl(TaskRegistry* registry, uint64_t chief_incarnation)
      : registry_(registry), incarnation_(chief_incarnation) {}

  // What to tell a task in answer to its heartbeat (default CONTINUE).
  std::function<HeartbeatResponse::Command(const TaskId&)> command_for;
  // A task's report that another failed (its error text already escaped).
  std::function<void(const ReportFailureRequest&)> on_failure;
  // Called after each registration, with its kind.
  std::function<void(const TaskInfo&, TaskRegistry::Registration)> on_register;
  std::function<JobStatusResponse()> job_status;

  // As gRPC calls them: raw bytes, parsed, then the methods below.
  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ReportFailure(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                          grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* JobStatus(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;

  grpc::Status Register(grpc::ServerContextBase*, const RegisterRequest* req, RegisterResponse* resp);
  grpc::Status Heartbeat(grpc::ServerContextBase*, const HeartbeatRequest* req, HeartbeatResponse* resp);
  grpc::Status ReportFailure(grpc::ServerContextBase*, const ReportFailureRequest* req,
                             ReportFailureResponse* resp);
  grpc::Status JobStatus(grpc::ServerContextBase*, const JobStatusRequest* req, JobStatusResponse* resp);

  void set_authenticator(RequestAuthenticator auth) { auth_ = std::move(auth); }
  // This chief's job: a registration carrying another identity is refused
  // (PERMISSION_DENIED naming both, see CheckSameJob); one carrying none
  // (a task older than RegisterRequest.job) is registered with a warning.
  // Unset (tests): nothing is checked.
  void set_job_identity(JobIdentity identity) { identity_ = std::move(identity); }

 private:
  RequestAuthenticator auth_;
  std::optional<JobIdentity> identity_;
  TaskRegistry* const registry_;
  const uint64_t incarnation_;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_CHIEF_SERVICE_H_
