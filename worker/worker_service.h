// The Worker gRPC service: the chief's handle on a Worker. Status is
// converted to gRPC here only.
#ifndef PSRT_WORKER_WORKER_SERVICE_H_
#define PSRT_WORKER_WORKER_SERVICE_H_

#include <functional>

#include "common/rpc/security.h"
#include "proto/worker_service.grpc.pb.h"
#include "worker/assignment_validator.h"
#include "worker/worker_runtime.h"

namespace psrt {

// Every method is raw and parsed by ServeParsed (common/rpc/parsed_unary.h):
// unparsable bytes get INVALID_ARGUMENT naming the method.
using WorkerServiceBase = Worker::WithRawCallbackMethod_Start<Worker::WithRawCallbackMethod_Pause<
    Worker::WithRawCallbackMethod_Resume<Worker::WithRawCallbackMethod_Status<
        Worker::WithRawCallbackMethod_Shutdown<Worker::Service>>>>>;

class WorkerServiceImpl final : public WorkerServiceBase {
 public:
  // `worker` is not owned. `on_shutdown` runs after the loop stops (the
  // daemon then leaves its serving loop).
  WorkerServiceImpl(WorkerRuntime* worker, std::function<void()> on_shutdown)
      : worker_(worker), on_shutdown_(std::move(on_shutdown)) {}
  // Every call is checked by `auth` first (set before the server starts).
  void set_authenticator(RequestAuthenticator auth) { auth_ = std::move(auth); }
  // Every Start's assignment is checked against these (set before the
  // server starts; the number of PS comes from the cluster spec).
  void set_assignment_limits(AssignmentLimits limits) { limits_ = limits; }

  // As gRPC calls them: raw bytes, parsed, then the methods below.
  grpc::ServerUnaryReactor* Start(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                  grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Pause(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                  grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Resume(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                   grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                   grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;

  grpc::Status Start(grpc::ServerContextBase*, const StartRequest* req, StartResponse*);
  grpc::Status Pause(grpc::ServerContextBase*, const PauseRequest* req, PauseResponse* resp);
  grpc::Status Resume(grpc::ServerContextBase*, const ResumeRequest* req, ResumeResponse*);
  grpc::Status Status(grpc::ServerContextBase*, const WorkerStatusRequest*, WorkerStatusResponse* resp);
  grpc::Status Shutdown(grpc::ServerContextBase*, const ShutdownRequest*, ShutdownResponse*);

 private:
  WorkerRuntime* const worker_;
  const std::function<void()> on_shutdown_;
  RequestAuthenticator auth_;
  AssignmentLimits limits_;
};

}  // namespace psrt

#endif  // PSRT_WORKER_WORKER_SERVICE_H_
