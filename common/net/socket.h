// Small POSIX socket helpers shared by the TCP ring (common/collective) and
// the PS data plane over TCP (common/transport, common/store).
//
// Every blocking-looking helper here is a poll loop with a deadline and an
// optional cancel flag: nothing waits forever on a peer. Sockets are
// non-blocking and writes use MSG_NOSIGNAL, so a dead peer is an error
// status, never SIGPIPE. Errors are UNAVAILABLE (peer gone, refused, reset),
// DEADLINE_EXCEEDED (deadline passed) or CANCELLED (cancel flag set).
#ifndef PSRT_COMMON_NET_SOCKET_H_
#define PSRT_COMMON_NET_SOCKET_H_

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace psrt {
namespace net {

// An owned file descriptor; closes on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// "strerror(err) (errno err)".
std::string ErrnoText(int err);

// Why a bind failed, as a sentence for an operator: EADDRINUSE is "the port
// is in use by another process", EACCES and EADDRNOTAVAIL say what to check;
// anything else is ErrnoText.
std::string BindErrorText(int err);

// Whether host:port can be listened on now (host empty: every interface;
// every address the host resolves to is tried). OK when each could be
// bound (the probe sockets are closed again); otherwise UNAVAILABLE
// "cannot listen on HOST:PORT: <BindErrorText>". Port 0 is always OK.
// Used to say why a server that binds on its own (gRPC) could not.
absl::Status ProbeListen(const std::string& host, int port);

// Splits "host:port" (or "[v6]:port"); INVALID_ARGUMENT if malformed.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& hostport);

// Makes `fd` non-blocking and close-on-exec; sets TCP_NODELAY and, when
// `buffer_bytes` > 0, SO_SNDBUF/SO_RCVBUF (0 keeps the kernel's autotuning).
absl::Status ConfigureSocket(int fd, int buffer_bytes);

// A listening socket on host:port (host empty: every interface; port 0:
// any free port), configured as ConfigureSocket does (accepted sockets
// inherit its buffer sizes). Returns it and the port it is bound to.
// Never shares a port (no SO_REUSEPORT): a port another process listens on
// is UNAVAILABLE "cannot listen on HOST:PORT: the port is in use by another
// process".
struct Listener {
  Fd fd;
  int port = 0;
};
absl::StatusOr<Listener> Listen(const std::string& host, int port, int buffer_bytes);

// One non-blocking connect to host:port, finished before `deadline`.
absl::StatusOr<Fd> ConnectOnce(const std::string& host, int port, int buffer_bytes,
                               absl::Time deadline, const std::atomic<bool>* cancel);

// Reads (write=false) or writes exactly `len` bytes of `buf` before
// `deadline`. EOF while reading is UNAVAILABLE. `what` names the peer in
// error messages.
absl::Status IoExact(int fd, void* buf, size_t len, bool write, absl::Time deadline,
                     const std::atomic<bool>* cancel, absl::string_view what);

// Sleeps `d` unless `cancel` is set first (checked every 20 ms).
void SleepUnlessCancelled(absl::Duration d, const std::atomic<bool>* cancel);

}  // namespace net
}  // namespace psrt

#endif  // PSRT_COMMON_NET_SOCKET_H_
