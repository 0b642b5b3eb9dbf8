// Starting a daemon's gRPC server: message limits from RpcOptions, a loud
// warning when plain text is served beyond loopback, an error naming the
// address when it cannot listen.
//
// A port another process listens on is refused, never shared: UNAVAILABLE
// "cannot listen on HOST:PORT: the port is in use by another process".
#ifndef PSRT_COMMON_RPC_SERVE_H_
#define PSRT_COMMON_RPC_SERVE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/channel_cache.h"
#include "grpcpp/server.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& listen,
                                                          const RpcOptions& options,
                                                          const std::vector<grpc::Service*>& services);

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_SERVE_H_
