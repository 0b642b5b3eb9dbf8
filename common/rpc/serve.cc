#include "common/rpc/serve.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& listen,
                                                          const RpcOptions& options,
                                                          const std::vector<grpc::Service*>& services) {
  bool loopback = absl::StartsWith(listen, "localhost:") || absl::StartsWith(listen, "127.") ||
                  absl::StartsWith(listen, "[::1]:");
  if (!loopback) {
    LOG(WARNING) << "listening on " << listen
                 << " in plain text: anyone who reaches this port can read and change the model";
  }
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(options, &builder);
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, " (in use?)"));
  }
  return server;
}

}  // namespace psrt
