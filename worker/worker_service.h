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

class WorkerServiceImpl final : public Worker::Service {
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

  grpc::Status Start(grpc::ServerContext*, const StartRequest* req, StartResponse*) override;
  grpc::Status Pause(grpc::ServerContext*, const PauseRequest* req, PauseResponse* resp) override;
  grpc::Status Resume(grpc::ServerContext*, const ResumeRequest* req, ResumeResponse*) override;
  grpc::Status Status(grpc::ServerContext*, const WorkerStatusRequest*,
                      WorkerStatusResponse* resp) override;
  grpc::Status Shutdown(grpc::ServerContext*, const ShutdownRequest*, ShutdownResponse*) override;

 private:
  WorkerRuntime* const worker_;
  const std::function<void()> on_shutdown_;
  RequestAuthenticator auth_;
  AssignmentLimits limits_;
};

}  // namespace psrt

#endif  // PSRT_WORKER_WORKER_SERVICE_H_
