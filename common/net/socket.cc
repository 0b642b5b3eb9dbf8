#include "common/net/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psrt {
namespace net {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

std::string BindErrorText(int err) {
  switch (err) {
    case EADDRINUSE:
      return "the port is in use by another process";
    case EACCES:
      return "permission denied (a port below 1024 needs privileges)";
    case EADDRNOTAVAIL:
      return "the address is not one of this machine's";
    default:
      return ErrnoText(err);
  }
}

namespace {

std::string HostPortText(const std::string& host, int port) {
  const std::string h = host.empty() ? "0.0.0.0" : host;
  return h.find(':') != std::string::npos ? absl::StrCat("[", h, "]:", port) : absl::StrCat(h, ":", port);
}

using AddrInfo = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// The addresses to listen on at host:port (host empty: every interface).
absl::StatusOr<AddrInfo> ResolveToListen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  AddrInfo owned(res, &::freeaddrinfo);
  if (gai != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", HostPortText(host, port), ": resolve: ", ::gai_strerror(gai)));
  }
  return owned;
}

}  // namespace

absl::Status ProbeListen(const std::string& host, int port) {
  if (port == 0) return absl::OkStatus();
  absl::StatusOr<AddrInfo> res = ResolveToListen(host, port);
  if (!res.ok()) return res.status();
  absl::Status status;
  // One address at a time, each probe closed before the next: "::" binds
  // dual-stack as gRPC's would.
  for (addrinfo* a = res->get(); a != nullptr && status.ok(); a = a->ai_next) {
    Fd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) continue;  // a family this machine lacks (no IPv6): nothing to collide with
    int one = 1;
    // As gRPC and Listen do: a port left in TIME_WAIT is free to take.
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 1) != 0) {
      status = absl::UnavailableError(absl::StrCat("cannot listen on ", HostPortText(host, port), ": ",
                                                   BindErrorText(errno)));
    }
  }
  return status;
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& hostport) {
  size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("peer address '", hostport, "' is not host:port"));
  }
  std::string host = hostport.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  if (!absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("peer address '", hostport, "' has no valid port"));
  }
  return std::make_pair(host, port);
}

absl::Status ConfigureSocket(int fd, int buffer_bytes) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
      ::fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
    return absl::InternalError(absl::StrCat("fcntl: ", ErrnoText(errno)));
  }
  int one = 1;
  // Best effort: TCP_NODELAY fails on non-TCP sockets, which we never have.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (buffer_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<Listener> Listen(const std::string& host, int port, int buffer_bytes) {
  absl::StatusOr<AddrInfo> resolved = ResolveToListen(host, port);
  if (!resolved.ok()) return resolved.status();
  const addrinfo* res = resolved->get();
  Fd fd(::socket(res->ai_family, SOCK_STREAM, 0));
  int one = 1;
  int rc = fd.valid() ? ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) : -1;
  absl::Status st = fd.valid() ? ConfigureSocket(fd.get(), buffer_bytes) : absl::OkStatus();
  if (rc == 0 && st.ok()) rc = ::bind(fd.get(), res->ai_addr, res->ai_addrlen);
  int err = errno;
  if (!st.ok()) return st;
  if (rc != 0 || ::listen(fd.get(), 64) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", HostPortText(host, port), ": ", BindErrorText(rc != 0 ? err : errno)));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  Listener l;
  l.port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  l.fd = std::move(fd);
  return l;
}

namespace {

// Milliseconds until `deadline`, clamped to [0, cap_ms].
int PollMillis(absl::Time deadline, int cap_ms) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(cap_ms, absl::ToInt64Milliseconds(left) + 1));
}

bool Cancelled(const std::atomic<bool>* cancel) {
  return cancel != nullptr && cancel->load(std::memory_order_relaxed);
}

}  // namespace

absl::StatusOr<Fd> ConnectOnce(const std::string& host, int port, int buffer_bytes,
                               absl::Time deadline, const std::atomic<bool>* cancel) {
  const std::string what = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("resolve ", what, ": ", ::gai_strerror(gai)));
  }
  Fd fd(::socket(res->ai_family, SOCK_STREAM, 0));
  if (!fd.valid()) {
    ::freeaddrinfo(res);
    return absl::InternalError(absl::StrCat("socket: ", ErrnoText(errno)));
  }
  absl::Status st = ConfigureSocket(fd.get(), buffer_bytes);
  int rc = st.ok() ? ::connect(fd.get(), res->ai_addr, res->ai_addrlen) : -1;
  int err = errno;
  if (!st.ok()) return st;
  if (rc != 0 && err != EINPROGRESS) {
    return absl::UnavailableError(absl::StrCat("connect ", what, ": ", ErrnoText(err)));
  }
  while (rc != 0) {
    if (Cancelled(cancel)) return absl::CancelledError("cancelled");
    pollfd p{fd.get(), POLLOUT, 0};
    int ms = PollMillis(deadline, 50);
    if (ms == 0) return absl::DeadlineExceededError(absl::StrCat("connect ", what, ": timed out"));
    int n = ::poll(&p, 1, ms);
    if (n < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno)));
    if (n <= 0) continue;
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
    if (so_error != 0) {
      return absl::UnavailableError(absl::StrCat("connect ", what, ": ", ErrnoText(so_error)));
    }
    rc = 0;
  }
  return fd;
}

absl::Status IoExact(int fd, void* buf, size_t len, bool write, absl::Time deadline,
                     const std::atomic<bool>* cancel, absl::string_view what) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = write ? ::send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                      : ::recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0 && !write) return absl::UnavailableError(absl::StrCat(what, " closed the connection"));
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(write ? "send to " : "recv from ", what, ": ",
                                                 ErrnoText(errno)));
    }
    if (Cancelled(cancel)) return absl::CancelledError("cancelled");
    int ms = PollMillis(deadline, 50);
    if (ms == 0) {
      return absl::DeadlineExceededError(absl::StrCat(what, " did not ", write ? "read" : "send",
                                                      " the handshake in time"));
    }
    pollfd pf{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (::poll(&pf, 1, ms) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

void SleepUnlessCancelled(absl::Duration d, const std::atomic<bool>* cancel) {
  absl::Time end = absl::Now() + d;
  while (!Cancelled(cancel)) {
    absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    absl::SleepFor(std::min(left, absl::Milliseconds(20)));
  }
}

}  // namespace net
}  // namespace psrt
