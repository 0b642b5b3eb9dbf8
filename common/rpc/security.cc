#include "common/rpc/security.h"

#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/server_credentials.h"
#include "openssl/evp.h"

namespace psrt {
namespace {

absl::StatusOr<std::string> ReadSecret(const std::string& path, absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (s.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": the file is empty"));
  }
  return s.str();
}

absl::Status ExpectPem(const std::string& pem, absl::string_view what, absl::string_view flag,
                       const std::string& path) {
  if (!absl::StrContains(pem, "-----BEGIN ") || !absl::StrContains(pem, what)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": not a PEM file holding a ", what));
  }
  return absl::OkStatus();
}

// A token line: at least 16 printable characters, no spaces.
absl::StatusOr<std::string> CheckToken(absl::string_view line, absl::string_view flag, const std::string& path) {
  std::string token(absl::StripAsciiWhitespace(line));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", path, ": the token (first line) has ",
                                                   token.size(),
                                                   " characters; use at least 16 (e.g. `openssl rand -hex 32`)"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", path, ": the token must be printable ASCII without spaces"));
    }
  }
  return token;
}

// The identity a token line names: a role ("worker", index -1) or a task
// ("worker-3", "ps-1", "chief-0"), spelled as certificates name tasks.
absl::StatusOr<std::pair<Role, int>> ParseTokenIdentity(absl::string_view name) {
  if (std::optional<Role> role = RoleFromName(name); role.has_value()) return std::make_pair(*role, -1);
  Caller task = CallerFromCertificateName(name);
  if (task.index >= 0 && !task.Has(Role::kObserver)) {
    for (Role r : {Role::kChief, Role::kPs, Role::kWorker}) {
      if (task.Has(r)) return std::make_pair(r, task.index);
    }
  }
  for (Role r : {Role::kChief, Role::kPs, Role::kWorker, Role::kObserver}) {
    if (absl::StartsWith(name, absl::StrCat(RoleName(r), "-"))) {
      return absl::InvalidArgumentError(absl::StrCat("bad task '", absl::CHexEscape(name),
                                                     "': a task is JOB-N (chief, ps or worker; N a decimal index ",
                                                     "without leading zeros)"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown role '", absl::CHexEscape(name),
                                                 "' (chief, ps, worker or observer, or a task such as worker-3)"));
}

// "ROLE sha256:HEX" or "TASK sha256:HEX" -> whom it names and 32 raw bytes.
absl::StatusOr<TokenDigest> ParseDigestLine(absl::string_view line) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
  constexpr absl::string_view kPrefix = "sha256:";
  if (f.size() != 2 || f[1].substr(0, kPrefix.size()) != kPrefix) {
    return absl::InvalidArgumentError(
        "expected `ROLE sha256:HEX` (ROLE one of chief, ps, worker, observer) or `TASK sha256:HEX` (e.g. worker-3)");
  }
  absl::StatusOr<std::pair<Role, int>> who = ParseTokenIdentity(f[0]);
  if (!who.ok()) return who.status();
  absl::string_view hex = f[1].substr(kPrefix.size());
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdefABCDEF") != absl::string_view::npos) {
    return absl::InvalidArgumentError("the digest must be 64 hex digits (sha256 of the role's token)");
  }
  return TokenDigest{who->first, who->second, absl::HexStringToBytes(hex)};
}

}  // namespace

// Compares without an early exit, so the time taken says nothing about how
// much of a guessed token was right (its length is no secret).
bool SecretsEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

std::string Sha256(absl::string_view text) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), out, &n, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(out), n);
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view flag) {
  auto text = ReadSecret(path, flag);
  if (!text.ok()) return text.status();
  return CheckToken(absl::string_view(*text).substr(0, text->find('\n')), flag, path);
}

std::string TransportSecurity::Describe() const {
  const char* token = role_tokens() ? "per-role tokens" : "shared token";
  if (tls() && token_auth()) return absl::StrCat("mutual TLS + ", token);
  if (tls()) return "mutual TLS";
  if (token_auth()) return absl::StrCat(token, " over plain text");
  return "plain text, no authentication";
}

absl::StatusOr<TransportSecurity> LoadTransportSecurity(const SecurityPaths& p) {
  TransportSecurity s;
  int tls_paths = !p.tls_ca.empty() + !p.tls_cert.empty() + !p.tls_key.empty();
  if (tls_paths != 0 && tls_paths != 3) {
    return absl::InvalidArgumentError(
        "TLS needs all of --tls_ca, --tls_cert and --tls_key (the cluster's CA, this task's "
        "certificate and its key)");
  }
  if (tls_paths == 3) {
    auto ca = ReadSecret(p.tls_ca, "tls_ca");
    if (!ca.ok()) return ca.status();
    auto cert = ReadSecret(p.tls_cert, "tls_cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadSecret(p.tls_key, "tls_key");
    if (!key.ok()) return key.status();
    if (auto st = ExpectPem(*ca, "CERTIFICATE", "tls_ca", p.tls_ca); !st.ok()) return st;
    if (auto st = ExpectPem(*cert, "CERTIFICATE", "tls_cert", p.tls_cert); !st.ok()) return st;
    if (auto st = ExpectPem(*key, "PRIVATE KEY", "tls_key", p.tls_key); !st.ok()) return st;
    s.ca_pem = *std::move(ca);
    s.cert_pem = *std::move(cert);
    s.key_pem = *std::move(key);
    s.server_name_override = p.tls_server_name;
  } else if (!p.tls_server_name.empty()) {
    return absl::InvalidArgumentError("--tls_server_name is set but TLS is not (--tls_ca, --tls_cert, --tls_key)");
  }
  if (!p.token_file.empty()) {
    auto text = ReadSecret(p.token_file, "auth_token_file");
    if (!text.ok()) return text.status();
    std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
    auto token = CheckToken(lines[0], "auth_token_file", p.token_file);
    if (!token.ok()) return token.status();
    s.token = *std::move(token);
    absl::flat_hash_map<std::string, size_t> line_of;  // digest -> its line
    for (size_t i = 1; i < lines.size(); ++i) {
      absl::string_view line = absl::StripAsciiWhitespace(lines[i]);
      if (line.empty() || line[0] == '#') continue;
      auto digest = ParseDigestLine(line);
      if (digest.ok() && !line_of.emplace(digest->digest, i + 1).second) {
        digest = absl::InvalidArgumentError(
            absl::StrCat("the same digest as line ", line_of[digest->digest], ": a token gives one identity"));
      }
      if (!digest.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--auth_token_file=", p.token_file, " line ", i + 1, ": ", digest.status().message()));
      }
      s.role_digests.push_back(*std::move(digest));
    }
  }
  return s;
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TransportSecurity& s) {
  if (!s.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = s.ca_pem;
  o.pem_private_key = s.key_pem;
  o.pem_cert_chain = s.cert_pem;
  return grpc::SslCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TransportSecurity& s) {
  if (!s.tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = s.ca_pem;
  o.pem_key_cert_pairs.push_back({s.key_pem, s.cert_pem});
  return grpc::SslServerCredentials(o);
}

std::string BearerValue(const std::string& token) { return "Bearer " + token; }

std::optional<Caller> CallerForToken(const std::vector<TokenDigest>& accepted, absl::string_view token) {
  if (token.empty()) return std::nullopt;
  std::string digest = Sha256(token);
  Caller c;
  c.roles = 0;
  for (const TokenDigest& d : accepted) {  // each digest is there once (LoadTransportSecurity)
    if (!SecretsEqual(digest, d.digest)) continue;
    c.roles = static_cast<uint8_t>(d.role);
    c.index = d.index;
  }
  if (c.roles == 0) return std::nullopt;
  c.name = c.index < 0 ? absl::StrCat("the ", c.RolesText(), " token")
                       : absl::StrCat("the ", c.RolesText(), "-", c.index, " token");
  return c;
}

RequestAuthenticator::RequestAuthenticator(const TransportSecurity& s) {
  if (!s.tls() && !s.token_auth()) return;
  auto c = std::make_shared<Config>();
  c->tls = s.tls();
  if (s.token_auth() && !s.role_tokens()) c->shared = BearerValue(s.token);
  c->role_digests = s.role_digests;
  config_ = std::move(c);
}

grpc::Status RequestAuthenticator::Identify(const grpc::ServerContextBase& ctx, Caller* caller) const {
  *caller = Caller();
  if (config_ == nullptr) {
    caller->name = "an unauthenticated caller";
    return grpc::Status::OK;
  }
  if (!config_->shared.empty() || !config_->role_digests.empty()) {
    const auto& md = ctx.client_metadata();
    auto it = md.find(kAuthMetadataKey);
    if (it == md.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this cluster requires a token: the call carried no authorization");
    }
    absl::string_view presented(it->second.data(), it->second.size());
    if (!config_->shared.empty()) {
      if (!SecretsEqual(presented, config_->shared)) {
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong authorization token");
      }
      caller->name = "the shared token";
    } else {
      constexpr absl::string_view kBearer = "Bearer ";
      std::optional<Caller> c =
          CallerForToken(config_->role_digests,
                         presented.substr(0, kBearer.size()) == kBearer ? presented.substr(kBearer.size()) : "");
      if (!c.has_value()) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong authorization token");
      *caller = *std::move(c);
    }
  }
  if (config_->tls) {
    std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
    std::vector<grpc::string_ref> cn;
    if (auth != nullptr) cn = auth->FindPropertyValues("x509_common_name");
    Caller cert = cn.empty() ? CallerFromCertificateName("")
                             : CallerFromCertificateName(absl::string_view(cn[0].data(), cn[0].size()));
    if (cn.empty()) cert.name = "a certificate without a common name";
    cert.roles &= caller->roles;  // with a token too: the roles both give
    if (caller->index >= 0 && cert.index != caller->index) cert.roles = 0;  // and the same task
    if (!caller->EveryRole()) cert.name = absl::StrCat(cert.name, " with ", caller->name);
    *caller = std::move(cert);
  }
  return grpc::Status::OK;
}

grpc::Status RequestAuthenticator::Authorize(const grpc::ServerContextBase& ctx, Rpc rpc,
                                             Caller* caller) const {
  Caller local;
  Caller* c = caller != nullptr ? caller : &local;
  if (grpc::Status s = Identify(ctx, c); !s.ok()) return s;
  return Permit(*c, rpc);
}

grpc::Status RequestAuthenticator::Permit(const Caller& c, Rpc rpc) {
  if ((c.roles & AllowedRoles(rpc)) != 0) return grpc::Status::OK;
  Caller allowed;
  allowed.roles = AllowedRoles(rpc);
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(c.name, " (role ", c.RolesText(), ") may not call ", RpcName(rpc),
                                   ": only ", allowed.RolesText(), " may"));
}

grpc::Status RequestAuthenticator::Check(const grpc::ServerContextBase& ctx) const {
  Caller ignored;
  return Identify(ctx, &ignored);
}

}  // namespace psrt
