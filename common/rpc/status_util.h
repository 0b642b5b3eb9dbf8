// Status conversion at the gRPC edge. Services and clients work in
// absl::Status; only handlers and stubs convert, here.
#ifndef PSRT_COMMON_RPC_STATUS_UTIL_H_
#define PSRT_COMMON_RPC_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace psrt {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);
// Like FromGrpcStatus, with "<peer>: <method>: " before the message so that
// a failure says which call to which task failed.
absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view peer,
                            absl::string_view method);

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_STATUS_UTIL_H_
