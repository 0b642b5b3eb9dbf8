// Who may talk to a daemon: mutual TLS, a shared token, or (on loopback
// only, by default) nobody checks.
//
// With TLS every connection must present a certificate signed by the
// cluster's CA (the handshake refuses it otherwise, on every service); each
// daemon presents its own certificate to its clients and peers, and the
// certificate's common name ("chief", "ps-0", "worker-3", see roles.h) is
// the caller's identity. With a token every call carries
// `authorization: Bearer TOKEN` (added by the channel, see channel_cache.h).
// Every handler calls RequestAuthenticator::Authorize first, so a call
// without credentials is refused with UNAUTHENTICATED and a call its role
// may not make with PERMISSION_DENIED, before it touches any state. Both
// may be on at once (then the caller must hold both roles).
//
// The token file (--auth_token_file): its first line is this task's own
// token, sent on its calls. Per-role tokens add lines naming the SHA-256 of
// each role's token, so a daemon can tell a worker's token from the chief's
// without holding the chief's token itself:
//
//   3f9a...e1                      <- this task's token (secret)
//   chief sha256:5b2c...           <- digests of the tokens this daemon
//   ps sha256:77d0...                 accepts, and the role each one gives
//   worker sha256:a1c4...
//   observer sha256:09be...
//
// A line may name a task instead of a role: `worker-3 sha256:...` (also
// `ps-1`, `chief-0`) gives that role and that index, so its holder may act
// for worker 3 only (Caller::MayActFor) and the PS's per-caller limits key
// on the task. A role line (`worker sha256:...`) gives the whole role
// (index -1). Each digest may appear once.
//
// `deploy/make_certs.sh` writes such files: OUT/tokens/ROLE (role lines)
// and, for each task it is given, OUT/tokens/TASK (that task's own token,
// every task's line and the observer role's). A file of one line is the
// legacy shared token: every holder has every role (no role checks are
// possible; the daemon logs a warning).
//
//   ASSIGN_OR_RETURN(TransportSecurity sec, LoadTransportSecurity(paths));
//   RpcOptions rpc; rpc.security = sec;     // channels and servers use it
#ifndef PSRT_COMMON_RPC_SECURITY_H_
#define PSRT_COMMON_RPC_SECURITY_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "common/rpc/roles.h"

namespace psrt {

// Where the secrets are (flags or the deployment's files).
struct SecurityPaths {
  std::string tls_ca;    // PEM: the cluster's CA, trusted for peers and clients
  std::string tls_cert;  // PEM: this task's certificate (chain)
  std::string tls_key;   // PEM: this task's private key
  std::string tls_server_name;  // name expected in peers' certificates, if not their host
  std::string token_file;       // first line: the shared token
};

// An accepted token: the SHA-256 (32 raw bytes) of the token and whom it
// identifies, a whole role (index -1) or one task of it.
struct TokenDigest {
  Role role = Role::kObserver;
  int index = -1;
  std::string digest;
};

// The secrets themselves.
struct TransportSecurity {
  std::string ca_pem, cert_pem, key_pem;
  std::string server_name_override;
  std::string token;
  // Per-role (or per-task) tokens: each accepted token's digest and the
  // identity it gives. Empty with a token: the legacy shared token.
  std::vector<TokenDigest> role_digests;

  bool tls() const { return !ca_pem.empty(); }
  bool token_auth() const { return !token.empty(); }
  bool role_tokens() const { return !role_digests.empty(); }
  // "mutual TLS + token", "plain text", ...
  std::string Describe() const;
};

// Reads and checks the files: all three TLS paths or none, PEM contents,
// a token of at least 16 characters, well-formed role and task lines, no
// digest twice. Errors name the flag, the file and the line.
absl::StatusOr<TransportSecurity> LoadTransportSecurity(const SecurityPaths& paths);

// The first line of a token file, checked as --auth_token_file's is;
// errors name `flag` and the file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view flag);

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TransportSecurity& s);
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TransportSecurity& s);

// Checks a call's credentials and role in a handler. Default-constructed it
// admits every call as every role (nothing configured). Cheap to copy.
//
//   if (grpc::Status a = auth_.Authorize(*ctx, Rpc::kPsRestore); !a.ok()) return a;
class RequestAuthenticator {
 public:
  RequestAuthenticator() = default;
  explicit RequestAuthenticator(const TransportSecurity& s);

  // Who is calling: UNAUTHENTICATED naming what was missing or wrong.
  grpc::Status Identify(const grpc::ServerContextBase& ctx, Caller* caller) const;
  // Identify, then the role table of roles.h: PERMISSION_DENIED naming the
  // caller, its role and the method. `caller` (optional) receives who it is.
  grpc::Status Authorize(const grpc::ServerContextBase& ctx, Rpc rpc, Caller* caller = nullptr) const;
  // Authentication only (any role).
  grpc::Status Check(const grpc::ServerContextBase& ctx) const;
  // The role table alone, for a caller identified already (a connection
  // whose identity was set once, e.g. the PS's TCP data plane):
  // PERMISSION_DENIED naming the caller, its role and the method.
  static grpc::Status Permit(const Caller& caller, Rpc rpc);

 private:
  struct Config {
    bool tls = false;
    std::string shared;  // "Bearer TOKEN" of the legacy shared token
    std::vector<TokenDigest> role_digests;
  };
  std::shared_ptr<const Config> config_;  // null = no check
};

// Whom `token` identifies among the accepted digests: its role and, for a
// task's token, its index ("the worker-3 token"); nullopt when none matches
// (or the token is empty).
std::optional<Caller> CallerForToken(const std::vector<TokenDigest>& accepted, absl::string_view token);

// Whether two secrets are equal, in time that depends on their length only.
bool SecretsEqual(absl::string_view a, absl::string_view b);

// SHA-256 of `text`, 32 raw bytes.
std::string Sha256(absl::string_view text);

// The metadata key and value a client sends in token mode.
inline constexpr char kAuthMetadataKey[] = "authorization";
std::string BearerValue(const std::string& token);

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_SECURITY_H_
