// The HTTP side every daemon shares: the --http_port, --http_listen and
// --http_token_file flags, and a /metrics page served on them by
// common/http's server (bounded heads, no bodies, slow clients dropped on
// their deadline, at most a fixed number of connections).
//
//   absl::StatusOr<HttpFlags> flags = HttpFlagsFromFlags();    // in main
//   if (!flags.ok()) return ExitWithError(flags.status());
//   std::unique_ptr<HttpServer> http;
//   if (flags->port > 0) {
//     auto s = ServeMetrics(*flags, [&] { return metrics.Text(); }, "psrt PS ps:0");
//     if (!s.ok()) return ExitWithError(s.status());
//     http = *std::move(s);
//   }
//
// The text function runs on the server's thread, one request at a time.
#ifndef PSRT_COMMON_METRICS_METRICS_HTTP_H_
#define PSRT_COMMON_METRICS_METRICS_HTTP_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/http/http_server.h"

namespace psrt {

// The flags, read (and the token file with them) in main.
struct HttpFlags {
  int port = 0;  // 0: no HTTP
  std::string host = "127.0.0.1";
  std::string token;  // empty: none required
};
absl::StatusOr<HttpFlags> HttpFlagsFromFlags();
// The file that defines them, for HelpFlags (common/flags_help.h).
const char* HttpFlagsFile();

// With a token: the 401 answer for a request without `Authorization:
// Bearer TOKEN` (or with another token); nullopt when it may be served.
// `bearer` is BearerValue(token), or empty for no token.
std::optional<HttpResponse> RefuseWithoutToken(const HttpRequest& req, const std::string& bearer);

// Serves `text()` at /metrics (Prometheus' text format) and a line naming
// the process (`title`) at /, on flags.host:flags.port. UNAVAILABLE, naming
// the address, when it cannot listen.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeMetrics(const HttpFlags& flags, std::function<std::string()> text,
                                                         const std::string& title);

// "http://localhost:PORT" for a loopback or wildcard host, else the host's.
std::string HttpBaseUrl(const std::string& host, int port);

}  // namespace psrt

#endif  // PSRT_COMMON_METRICS_METRICS_HTTP_H_
