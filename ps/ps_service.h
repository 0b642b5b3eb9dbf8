// The ParameterServer gRPC service: the edge over ParameterServerCore.
//
// Push, Pull, PullRows and PushRows are raw callback methods: their bytes
// are read and written by ps_wire.h (no protobuf copies), and a pull that
// must wait (SYNC, bounded staleness) parks a callback in the core instead
// of a thread. The control methods are ordinary callback methods. Status is
// converted to gRPC here only.
#ifndef PSRT_PS_PS_SERVICE_H_
#define PSRT_PS_PS_SERVICE_H_

#include "proto/ps_service.grpc.pb.h"
#include "ps/server_core.h"

namespace psrt {

using PsServiceBase = ParameterServer::WithRawCallbackMethod_Pull<
    ParameterServer::WithRawCallbackMethod_Push<ParameterServer::WithRawCallbackMethod_PullRows<
        ParameterServer::WithRawCallbackMethod_PushRows<ParameterServer::CallbackService>>>>;

class PsServiceImpl final : public PsServiceBase {
 public:
  // `core` is not owned and outlives the service.
  explicit PsServiceImpl(ParameterServerCore* core) : core_(core) {}

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* PullRows(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* PushRows(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                     grpc::ByteBuffer* resp) override;

  grpc::ServerUnaryReactor* CreateVariables(grpc::CallbackServerContext* ctx,
                                            const CreateVariablesRequest* req,
                                            CreateVariablesResponse* resp) override;
  grpc::ServerUnaryReactor* Snapshot(grpc::CallbackServerContext* ctx, const SnapshotRequest* req,
                                     SnapshotResponse* resp) override;
  grpc::ServerUnaryReactor* Restore(grpc::CallbackServerContext* ctx, const RestoreRequest* req,
                                    RestoreResponse* resp) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const PsStatusRequest* req,
                                   PsStatusResponse* resp) override;

 private:
  ParameterServerCore* const core_;
};

}  // namespace psrt

#endif  // PSRT_PS_PS_SERVICE_H_
