// One unary call through a generated stub, with a deadline, its status
// converted and named after the peer and method:
//
//   ASSIGN_OR_RETURN(PsStatusResponse s,
//       CallUnary(stub.get(), &ParameterServer::Stub::Status, PsStatusRequest(),
//                 absl::Seconds(5), "ps:0", "Status"));
#ifndef PSRT_COMMON_RPC_UNARY_CALL_H_
#define PSRT_COMMON_RPC_UNARY_CALL_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/rpc/retry.h"
#include "common/rpc/status_util.h"
#include "grpcpp/client_context.h"

namespace psrt {

template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CallUnary(Stub* stub,
                                   grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                                   const Request& request, absl::Duration timeout,
                                   absl::string_view peer, absl::string_view name) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  Response response;
  absl::Status s = FromGrpcStatus((stub->*method)(&ctx, request, &response), peer, name);
  if (!s.ok()) return s;
  return response;
}

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_UNARY_CALL_H_
