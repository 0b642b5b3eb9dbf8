#include "common/metrics/metrics_http.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/security.h"

ABSL_FLAG(int, http_port, 0,
          "Serve /metrics (Prometheus text format) on this port, and a status page at / (0 = off).");
ABSL_FLAG(std::string, http_listen, "127.0.0.1",
          "IP address --http_port listens on (0.0.0.0: every interface; then consider --http_token_file).");
ABSL_FLAG(std::string, http_token_file, "",
          "File whose first line is a token every HTTP request must carry "
          "(Authorization: Bearer TOKEN; Prometheus: bearer_token_file).");

namespace psrt {

const char* HttpFlagsFile() { return __FILE__; }

absl::StatusOr<HttpFlags> HttpFlagsFromFlags() {
  HttpFlags f;
  f.port = absl::GetFlag(FLAGS_http_port);
  if (f.port < 0 || f.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--http_port=", f.port, ": want 0 (off) to 65535"));
  }
  f.host = absl::GetFlag(FLAGS_http_listen);
  if (!absl::GetFlag(FLAGS_http_token_file).empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(absl::GetFlag(FLAGS_http_token_file), "http_token_file");
    if (!t.ok()) return t.status();
    f.token = *t;
  }
  return f;
}

std::optional<HttpResponse> RefuseWithoutToken(const HttpRequest& req, const std::string& bearer) {
  if (bearer.empty()) return std::nullopt;
  const std::string* auth = req.Header("authorization");
  if (auth != nullptr && SecretsEqual(*auth, bearer)) return std::nullopt;
  HttpResponse res;
  res.status = 401;
  res.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"psrt\"");
  res.body = auth == nullptr ? "this page requires a token (Authorization: Bearer TOKEN)\n" : "wrong token\n";
  return res;
}

absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetrics(const HttpFlags& flags, std::function<std::string()> text,
                                                         const std::string& title) {
  const std::string bearer = flags.token.empty() ? "" : BearerValue(flags.token);
  return HttpServer::Start(
      flags.host, flags.port,
      [text = std::move(text), title, bearer](const HttpRequest& req) {
        if (std::optional<HttpResponse> refused = RefuseWithoutToken(req, bearer)) return *refused;
        HttpResponse res;
        if (req.path == "/metrics") {
          res.content_type = "text/plain; version=0.0.4";
          res.body = text();
        } else if (req.path == "/") {
          res.body = absl::StrCat(title, ": /metrics\n");
        } else {
          res.status = 404;
          res.body = "not found: / and /metrics only\n";
        }
        return res;
      },
      HttpServerOptions());
}

std::string HttpBaseUrl(const std::string& host, int port) {
  return absl::StrCat("http://", host == "127.0.0.1" || host == "0.0.0.0" || host == "::" ? "localhost" : host, ":",
                      port);
}

}  // namespace psrt
