#include "common/rpc/serve.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/net/socket.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& listen,
                                                          const RpcOptions& options,
                                                          const std::vector<grpc::Service*>& services) {
  bool loopback = absl::StartsWith(listen, "localhost:") || absl::StartsWith(listen, "127.") ||
                  absl::StartsWith(listen, "[::1]:");
  const TransportSecurity& sec = options.security;
  if (!loopback && !sec.tls() && !sec.token_auth()) {
    LOG(WARNING) << "INSECURE: listening on " << listen
                 << " in plain text with no authentication: anyone who reaches this port can read "
                    "and change the model. Use --tls_ca/--tls_cert/--tls_key (deploy/make_certs.sh) "
                    "or --auth_token_file.";
  } else if (!loopback && !sec.tls()) {
    LOG(WARNING) << "listening on " << listen << " with " << (sec.role_tokens() ? "per-role tokens" : "a shared token")
                 << " over plain text: calls are authenticated but not "
                    "encrypted (use TLS where the network is not trusted)";
  }
  if (sec.token_auth() && !sec.role_tokens() && !sec.tls()) {
    LOG(WARNING) << "--auth_token_file holds one shared token: every holder may call every method "
                    "(a worker could restore a PS). Use per-role tokens (deploy/make_certs.sh, "
                    "OUT/tokens/ROLE) or mutual TLS, whose certificates name each task.";
  }
  // gRPC's own failure says nothing of why: ask the kernel first (and again
  // after a failure, for a port taken in between). A port another process
  // holds is refused, never shared (ConfigureServerBuilder turns
  // SO_REUSEPORT off).
  absl::StatusOr<std::pair<std::string, int>> host_port = net::SplitHostPort(listen);
  if (!host_port.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot listen on '", listen, "': not host:port"));
  }
  auto [host, port_wanted] = *host_port;
  if (host == "0.0.0.0" || host == "::") host.clear();
  RETURN_IF_ERROR(net::ProbeListen(host, port_wanted));
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(options, &builder);
  int port = 0;
  builder.AddListeningPort(listen, ServerCredentialsFor(sec), &port);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    absl::Status why = net::ProbeListen(host, port_wanted);
    if (!why.ok()) return why;
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, ": gRPC refused the address"));
  }
  LOG(INFO) << "serving at " << listen << " (" << sec.Describe() << ")";
  return server;
}

}  // namespace psrt
