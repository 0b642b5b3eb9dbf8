#include "common/rpc/security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"

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

// Compares without an early exit, so the time taken says nothing about how
// much of a guessed token was right (its length is no secret).
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

std::string TransportSecurity::Describe() const {
  if (tls() && token_auth()) return "mutual TLS + shared token";
  if (tls()) return "mutual TLS";
  if (token_auth()) return "shared token over plain text";
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
    std::string token(absl::StripAsciiWhitespace(text->substr(0, text->find('\n'))));
    if (token.size() < 16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_token_file=", p.token_file, ": the token (first line) has ", token.size(),
          " characters; use at least 16 (e.g. `openssl rand -hex 32`)"));
    }
    for (char c : token) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--auth_token_file=", p.token_file, ": the token must be printable ASCII without spaces"));
      }
    }
    s.token = std::move(token);
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

RequestAuthenticator::RequestAuthenticator(const TransportSecurity& s) {
  if (s.token_auth()) expected_ = std::make_shared<const std::string>(BearerValue(s.token));
}

grpc::Status RequestAuthenticator::Check(const grpc::ServerContextBase& ctx) const {
  if (expected_ == nullptr) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  auto it = md.find(kAuthMetadataKey);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this cluster requires a token: the call carried no authorization");
  }
  if (!SameSecret(absl::string_view(it->second.data(), it->second.size()), *expected_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong authorization token");
  }
  return grpc::Status::OK;
}

}  // namespace psrt
