// A small HTTP/1.1 server for read-only pages (the chief's status page and
// /metrics): GET and HEAD only, no request bodies, one request per
// connection, everything on one thread with non-blocking sockets.
//
// Why not a thread per connection (cpp-httplib): a client that sends its
// request a byte at a time held one of its 8 threads for as long as it
// liked, and nothing bounded the header count or the body it read. Here a
// connection costs a buffer of at most `max_request_bytes`, must deliver its
// whole request within `request_timeout` and take its answer within
// `write_timeout`; past `max_connections` the oldest connection is dropped
// for the new one. A slow client delays nobody: the loop never blocks on one.
//
//   HttpServerOptions o;
//   auto server = HttpServer::Start("127.0.0.1", 8080, [](const HttpRequest& r) {
//     return HttpResponse{200, "text/plain", "hello\n"};
//   }, o);
//   ...
//   (*server)->Stop();  // or destroy it
//
// The handler runs on the server's thread, one request at a time: keep it
// quick and thread-safe with respect to the rest of the program.
#ifndef PSRT_COMMON_HTTP_HTTP_SERVER_H_
#define PSRT_COMMON_HTTP_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace psrt {

struct HttpServerOptions {
  size_t max_request_bytes = 16 * 1024;  // request line and headers
  int max_headers = 64;
  int max_connections = 64;
  absl::Duration request_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(5);
};

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // without the query
  std::string query;   // after '?', undecoded
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  // The first header of that (lower-case) name, or null.
  const std::string* Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  // Binds host:port (port 0 picks one) and serves on a thread of its own.
  // UNAVAILABLE if it cannot listen, INVALID_ARGUMENT for a host that is
  // not an IP address.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& host, int port,
                                                           HttpHandler handler, HttpServerOptions options);
  ~HttpServer();  // Stop()

  // Closes every connection and joins the thread. Idempotent.
  void Stop();
  int port() const { return port_; }

 private:
  struct Connection;
  HttpServer(int listen_fd, int wake_read, int wake_write, int port, HttpHandler handler,
             HttpServerOptions options);
  void Loop();
  void Accept(std::vector<Connection>* conns);
  // Reads what is there; once the request is whole (or refused) queues the
  // answer. Returns false when the connection should close now.
  bool ReadFrom(Connection* c);
  HttpResponse Answer(absl::string_view head) const;

  const int listen_fd_, wake_read_, wake_write_, port_;
  const HttpHandler handler_;
  const HttpServerOptions options_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

// Renders a response as HTTP/1.1 with Connection: close (exposed for tests).
std::string SerializeHttpResponse(const HttpResponse& r, bool head_only);
// `text` with & < > " ' replaced by entities, for HTML.
std::string HtmlEscape(absl::string_view text);

}  // namespace psrt

#endif  // PSRT_COMMON_HTTP_HTTP_SERVER_H_
