// Who may talk to a daemon: mutual TLS, a shared token, or (on loopback
// only, by default) nobody checks.
//
// With TLS every connection must present a certificate signed by the
// cluster's CA (the handshake refuses it otherwise, on every service); each
// daemon presents its own certificate to its clients and peers. With a
// token every call carries `authorization: Bearer TOKEN` (added by the
// channel, see channel_cache.h) and every handler checks it first through
// RequestAuthenticator, so a call without it is refused with UNAUTHENTICATED
// before it touches any state. Both may be on at once.
//
//   ASSIGN_OR_RETURN(TransportSecurity sec, LoadTransportSecurity(paths));
//   RpcOptions rpc; rpc.security = sec;     // channels and servers use it
#ifndef PSRT_COMMON_RPC_SECURITY_H_
#define PSRT_COMMON_RPC_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace psrt {

// Where the secrets are (flags or the deployment's files).
struct SecurityPaths {
  std::string tls_ca;    // PEM: the cluster's CA, trusted for peers and clients
  std::string tls_cert;  // PEM: this task's certificate (chain)
  std::string tls_key;   // PEM: this task's private key
  std::string tls_server_name;  // name expected in peers' certificates, if not their host
  std::string token_file;       // first line: the shared token
};

// The secrets themselves.
struct TransportSecurity {
  std::string ca_pem, cert_pem, key_pem;
  std::string server_name_override;
  std::string token;

  bool tls() const { return !ca_pem.empty(); }
  bool token_auth() const { return !token.empty(); }
  // "mutual TLS + token", "plain text", ...
  std::string Describe() const;
};

// Reads and checks the files: all three TLS paths or none, PEM contents,
// a token of at least 16 characters. Errors name the flag and the file.
absl::StatusOr<TransportSecurity> LoadTransportSecurity(const SecurityPaths& paths);

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TransportSecurity& s);
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TransportSecurity& s);

// Checks a call's token in a handler. Default-constructed it admits every
// call (no token configured). Cheap to copy.
class RequestAuthenticator {
 public:
  RequestAuthenticator() = default;
  explicit RequestAuthenticator(const TransportSecurity& s);

  // OK, or UNAUTHENTICATED naming what was missing.
  grpc::Status Check(const grpc::ServerContextBase& ctx) const;

 private:
  std::shared_ptr<const std::string> expected_;  // "Bearer TOKEN"; null = no check
};

// The metadata key and value a client sends in token mode.
inline constexpr char kAuthMetadataKey[] = "authorization";
std::string BearerValue(const std::string& token);

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_SECURITY_H_
