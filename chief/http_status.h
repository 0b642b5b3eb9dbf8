// The chief's HTTP side: /metrics in Prometheus' text format and a small
// status page at /, for dashboards and people. Plain HTTP on its own port
// (--http_port); it only reads the job's status.
//
//   HttpStatusServer http([&] { return coordinator.Status(); });
//   RETURN_IF_ERROR(http.Start("0.0.0.0", 8080));
//   ...
//   http.Stop();
#ifndef PSRT_CHIEF_HTTP_STATUS_H_
#define PSRT_CHIEF_HTTP_STATUS_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "proto/chief_service.pb.h"

namespace httplib {
class Server;
}

namespace psrt {

// The metrics text for a status (exposed for tests).
std::string PrometheusMetrics(const JobStatusResponse& status, int64_t total_steps);

class HttpStatusServer {
 public:
  HttpStatusServer(std::function<JobStatusResponse()> status, int64_t total_steps = 0);
  ~HttpStatusServer();  // Stop()

  // Binds and serves on a thread; port 0 picks one (see port()).
  absl::Status Start(const std::string& host, int port);
  void Stop();
  int port() const { return port_; }

 private:
  const std::function<JobStatusResponse()> status_;
  const int64_t total_steps_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_HTTP_STATUS_H_
