#include "common/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/net/socket.h"

namespace psrt {
namespace {

// After the answer, what a client still sends (a body we refused) is read
// and dropped for a moment, so closing does not reset the connection before
// the client has read the answer; bounded in time and bytes.
constexpr absl::Duration kLinger = absl::Seconds(1);
constexpr size_t kMaxLingerBytes = 1 << 20;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : "Error";
  }
}

HttpResponse Refuse(int status, absl::string_view why) {
  HttpResponse r;
  r.status = status;
  r.body = absl::StrCat(status, " ", Reason(status), ": ", why, "\n");
  return r;
}

}  // namespace

struct HttpServer::Connection {
  enum class State { kReading, kWriting, kLingering };
  int fd = -1;
  State state = State::kReading;
  std::string in;
  std::string out;
  size_t sent = 0;
  size_t drained = 0;
  absl::Time deadline;
};

const std::string* HttpRequest::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string SerializeHttpResponse(const HttpResponse& r, bool head_only) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status), "\r\nContent-Type: ",
                                 r.content_type, "\r\nContent-Length: ", r.body.size(),
                                 "\r\nConnection: close\r\nCache-Control: no-store\r\n");
  for (const auto& [k, v] : r.headers) absl::StrAppend(&out, k, ": ", v, "\r\n");
  absl::StrAppend(&out, "\r\n");
  if (!head_only) absl::StrAppend(&out, r.body);
  return out;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& host, int port,
                                                              HttpHandler handler, HttpServerOptions options) {
  std::string ip = host == "localhost" ? "127.0.0.1" : host;
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("HTTP listen address '", host,
                                                   "' is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)"));
  }
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("HTTP port ", port, " out of range"));
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 128) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", host, ":", port, ": ", net::BindErrorText(err)));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  int bound_port = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                                    : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  int wake[2];
  if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::unique_ptr<HttpServer> s(new HttpServer(fd, wake[0], wake[1], bound_port, std::move(handler), options));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

HttpServer::HttpServer(int listen_fd, int wake_read, int wake_write, int port, HttpHandler handler,
                       HttpServerOptions options)
    : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), port_(port),
      handler_(std::move(handler)), options_(options) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (stopped_.exchange(true)) return;
  char c = 'x';
  (void)!write(wake_write_, &c, 1);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

void HttpServer::Accept(std::vector<Connection>* conns) {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN (all taken), or an error the next poll retries
    if (static_cast<int>(conns->size()) >= options_.max_connections) {
      close(conns->front().fd);  // the oldest gives way: holding a slot gains a slow client nothing
      conns->erase(conns->begin());
    }
    Connection c;
    c.fd = fd;
    c.deadline = absl::Now() + options_.request_timeout;
    conns->push_back(std::move(c));
  }
}

HttpResponse HttpServer::Answer(absl::string_view head) const {
  std::vector<absl::string_view> lines = absl::StrSplit(head, '\n');
  for (absl::string_view& l : lines) {
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  }
  if (static_cast<int>(lines.size()) - 1 > options_.max_headers) {
    return Refuse(431, absl::StrCat("more than ", options_.max_headers, " headers"));
  }
  std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
  if (first.size() != 3 || first[1].empty() || first[1][0] != '/') return Refuse(400, "malformed request line");
  if (first[2] != "HTTP/1.1" && first[2] != "HTTP/1.0") return Refuse(505, "HTTP/1.0 and 1.1 only");
  HttpRequest req;
  req.method = std::string(first[0]);
  size_t q = first[1].find('?');
  req.path = std::string(first[1].substr(0, q));
  if (q != absl::string_view::npos) req.query = std::string(first[1].substr(q + 1));
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == 0 || colon == absl::string_view::npos || lines[i].substr(0, colon).find_first_of(" \t") !=
                                                               absl::string_view::npos) {
      return Refuse(400, "malformed header line");
    }
    req.headers.emplace_back(absl::AsciiStrToLower(lines[i].substr(0, colon)),
                             std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
  }
  const std::string* length = req.Header("content-length");
  if ((length != nullptr && *length != "0") || req.Header("transfer-encoding") != nullptr) {
    return Refuse(413, "this server takes no request body");
  }
  if (req.method != "GET" && req.method != "HEAD") {
    HttpResponse r = Refuse(405, "GET or HEAD only");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  return handler_(req);
}

bool HttpServer::ReadFrom(Connection* c) {
  char buf[4096];
  size_t room = c->state == Connection::State::kLingering ? sizeof(buf)
                                                          : std::min(sizeof(buf), options_.max_request_bytes + 1 - c->in.size());
  ssize_t n = recv(c->fd, buf, room, 0);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (c->state == Connection::State::kLingering) {
    c->drained += static_cast<size_t>(n);
    return c->drained < kMaxLingerBytes;
  }
  size_t scan_from = c->in.size() < 3 ? 0 : c->in.size() - 3;
  c->in.append(buf, static_cast<size_t>(n));
  size_t end = c->in.find("\r\n\r\n", scan_from);
  size_t end_bare = c->in.find("\n\n", scan_from);
  if (end == std::string::npos || (end_bare != std::string::npos && end_bare < end)) end = end_bare;
  HttpResponse r;
  if (end != std::string::npos) {
    r = Answer(absl::string_view(c->in).substr(0, end));
  } else if (c->in.size() > options_.max_request_bytes) {
    r = Refuse(431, absl::StrCat("request head over ", options_.max_request_bytes, " bytes"));
  } else if (std::count(c->in.begin(), c->in.end(), '\n') > options_.max_headers + 1) {
    r = Refuse(431, absl::StrCat("more than ", options_.max_headers, " headers"));
  } else {
    return true;  // more to come
  }
  bool head_only = absl::StartsWith(c->in, "HEAD ");
  c->out = SerializeHttpResponse(r, head_only);
  c->in.clear();
  c->in.shrink_to_fit();
  c->state = Connection::State::kWriting;
  c->deadline = absl::Now() + options_.write_timeout;
  return true;
}

void HttpServer::Loop() {
  std::vector<Connection> conns;
  std::vector<pollfd> fds;
  while (!stopped_.load()) {
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_read_, POLLIN, 0});
    absl::Time now = absl::Now();
    absl::Duration wait = absl::Seconds(1);
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.state == Connection::State::kWriting ? POLLOUT : POLLIN), 0});
      wait = std::min(wait, std::max(absl::ZeroDuration(), c.deadline - now));
    }
    int ready = poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (ready > 0 && (fds[1].revents & POLLIN)) break;
    now = absl::Now();
    std::vector<Connection> alive;
    alive.reserve(conns.size());
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      short re = ready > 0 ? fds[i + 2].revents : 0;
      bool keep = true;
      if (c.state == Connection::State::kWriting && (re & POLLOUT)) {
        ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) c.sent += static_cast<size_t>(n);
        keep = n > 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        if (keep && c.sent == c.out.size()) {
          shutdown(c.fd, SHUT_WR);
          c.state = Connection::State::kLingering;
          c.deadline = now + kLinger;
        }
      } else if (re & (POLLIN | POLLHUP | POLLERR)) {
        keep = c.state != Connection::State::kWriting && ReadFrom(&c);
      } else if (re & POLLNVAL) {
        keep = false;
      }
      if (keep && now >= c.deadline) keep = false;  // too slow to ask, to read, or done lingering
      if (keep) {
        alive.push_back(std::move(c));
      } else {
        close(c.fd);
      }
    }
    conns = std::move(alive);
    if (ready > 0 && (fds[0].revents & POLLIN)) Accept(&conns);
  }
  for (Connection& c : conns) close(c.fd);
}

}  // namespace psrt
