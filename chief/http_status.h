// The chief's HTTP side: /metrics in Prometheus' text format and a small
// status page at /, for dashboards and people. Plain HTTP on its own port
// (--http_port, on --http_listen: loopback unless told otherwise); it only
// reads the job's status. Every text a peer could have chosen (addresses,
// error messages) is HTML-escaped; with a token, every request must carry
// `Authorization: Bearer TOKEN` (Prometheus: `bearer_token_file`). The
// server (common/http) bounds heads, refuses bodies and is not held up by
// slow clients.
//
//   HttpStatusServer http([&] { return coordinator.Status(); });
//   RETURN_IF_ERROR(http.Start("127.0.0.1", 8080));
//   ...
//   http.Stop();
#ifndef PSRT_CHIEF_HTTP_STATUS_H_
#define PSRT_CHIEF_HTTP_STATUS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/http/http_server.h"
#include "proto/chief_service.pb.h"

namespace psrt {

// The metrics text for a status (exposed for tests).
std::string PrometheusMetrics(const JobStatusResponse& status, int64_t total_steps);
// The HTML page, every peer-chosen text escaped (exposed for tests).
std::string StatusPage(const JobStatusResponse& status, int64_t total_steps);

class HttpStatusServer {
 public:
  HttpStatusServer(std::function<JobStatusResponse()> status, int64_t total_steps = 0);
  ~HttpStatusServer();  // Stop()

  // Binds host (an IP address) and serves on a thread; port 0 picks one
  // (see port()). A non-empty `token` is required of every request.
  absl::Status Start(const std::string& host, int port, const std::string& token = "",
                     HttpServerOptions options = HttpServerOptions());
  void Stop();
  int port() const { return port_; }

 private:
  HttpResponse Serve(const HttpRequest& req) const;

  const std::function<JobStatusResponse()> status_;
  const int64_t total_steps_;
  std::string bearer_;  // "Bearer TOKEN"; empty: no token; set before serving
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_HTTP_STATUS_H_
