// The data path of TcpRingCollective.
//
// A call is a Plan: the segments this rank sends to rank+1, in order, and
// the segments it receives from rank-1, in order. Send step i may only go
// as far as receive step dep(i) has been committed (reduced or copied):
// for the all-reduce dep(i) = i-1, because what a rank forwards at step i
// is exactly what it finished at step i-1; the first send step and the
// broadcast root's send depend on nothing. Both streams are prefixed by a
// fixed header (operation, sequence number, count, root) that the receiver
// checks against its own call, so ranks that disagree fail instead of
// mixing up bytes.
//
// Invariant that makes in-place reuse of `data` safe: a byte of the
// receive stream is only written to `data` after every earlier-sent copy
// of that byte has left this process, because the finished value of an
// element cannot exist anywhere before this rank's contribution to it
// arrived at rank+1.
#include "common/collective/tcp_ring.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/collective/float_add.h"
#include "common/collective/ring_handshake.h"
#include "common/status_macros.h"

namespace psrt {

using net::ErrnoText;
using net::Fd;

namespace {

constexpr uint32_t kCallMagic = 0x4c4c4f43;  // "COLL"
constexpr size_t kHeader = 32;
enum Op : uint32_t { kAllReduceSum = 1, kBroadcast = 2 };

void PutHeader(unsigned char* p, uint32_t op, uint64_t seq, uint64_t n, int32_t root) {
  std::memset(p, 0, kHeader);
  std::memcpy(p, &kCallMagic, 4);  // the ring runs on one architecture family: host order
  std::memcpy(p + 4, &op, 4);
  std::memcpy(p + 8, &seq, 8);
  std::memcpy(p + 16, &n, 8);
  std::memcpy(p + 24, &root, 4);
}

// A caller's mistake: fails this call only (the peers then time out or
// see a mismatch), the object stays usable.
absl::Status CheckBuffer(const float* data, size_t n, int ranks) {
  if (data == nullptr) return absl::InvalidArgumentError("data is null");
  if (n > std::numeric_limits<size_t>::max() / sizeof(float) / static_cast<size_t>(ranks)) {
    return absl::InvalidArgumentError(absl::StrCat(n, " floats is more than a collective can address"));
  }
  return absl::OkStatus();
}

}  // namespace

struct TcpRingCollective::Plan {
  struct Seg {
    char* base = nullptr;
    size_t bytes = 0;
  };
  std::vector<Seg> sends, recvs;
  size_t reduce_steps = 0;  // the first reduce_steps receive steps are added, the rest copied
  int dep_shift = -1;       // send step i waits for receive step i + dep_shift
  unsigned char header[kHeader];
};

absl::StatusOr<std::unique_ptr<CollectiveListener>> CollectiveListener::Bind(const std::string& host, int port) {
  // Accepted sockets inherit the listener's buffer sizes (which sets the TCP window scale).
  absl::StatusOr<net::Listener> l = net::Listen(host, port, TcpRingOptions().socket_buffer_bytes);
  if (!l.ok()) return l.status();
  // The listen queue stays net::Listen's 64, not SOMAXCONN: a deep queue
  // puts the neighbour behind every stranger queued before it (each taken
  // in turn by AcceptFromPrev); a short one may drop its SYN, which
  // ConnectToNext's 250 ms attempts make cheap.
  return std::unique_ptr<CollectiveListener>(new CollectiveListener(std::move(l->fd), l->port));
}

absl::StatusOr<std::unique_ptr<TcpRingCollective>> TcpRingCollective::Create(CollectiveListener* listener,
                                                                             TcpRingOptions o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank, " of ", o.size, " is not a valid rank"));
  }
  if (o.size > 1 && (listener == nullptr || o.peers.size() != static_cast<size_t>(o.size))) {
    return absl::InvalidArgumentError(absl::StrCat("a group of ", o.size, " needs a listener and ", o.size,
                                                   " peer addresses, got ", o.peers.size()));
  }
  if (o.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("timeout must be positive");
  o.chunk_bytes = std::max<size_t>(4096, o.chunk_bytes / 4 * 4);
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
  Fd wake_read(pipe_fds[0]), wake_write(pipe_fds[1]);
  for (int fd : pipe_fds) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  Fd next, prev;
  if (o.size > 1) {
    collective_internal::HandshakeParams hp{o.rank, o.size, o.group_id, o.token, o.socket_buffer_bytes};
    const absl::Time deadline = absl::Now() + o.connect_timeout;
    std::atomic<bool> cancel{false};
    absl::StatusOr<Fd> accepted = absl::UnknownError("not run");
    std::thread acceptor([&] {
      accepted = collective_internal::AcceptFromPrev(listener->fd(), hp, deadline, &cancel);
      if (!accepted.ok()) cancel = true;
    });
    absl::StatusOr<Fd> connected =
        collective_internal::ConnectToNext(hp, o.peers[(o.rank + 1) % o.size], deadline, &cancel);
    if (!connected.ok()) cancel = true;
    acceptor.join();
    // Report the cause, not the cancellation it triggered on the other side;
    // a refused token first (the other side then often only times out).
    if (!accepted.ok() && absl::IsUnauthenticated(accepted.status())) return accepted.status();
    if (!connected.ok() && !absl::IsCancelled(connected.status())) return connected.status();
    if (!accepted.ok()) return accepted.status();
    if (!connected.ok()) return connected.status();
    next = std::move(*connected);
    prev = std::move(*accepted);
  }
  return std::unique_ptr<TcpRingCollective>(
      new TcpRingCollective(std::move(o), std::move(next), std::move(prev), std::move(wake_read), std::move(wake_write)));
}

TcpRingCollective::TcpRingCollective(TcpRingOptions options, Fd next, Fd prev, Fd wake_read, Fd wake_write)
    : options_(std::move(options)),
      next_(std::move(next)),
      prev_(std::move(prev)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      next_name_(options_.size > 1 ? absl::StrCat("rank ", (options_.rank + 1) % options_.size, " (",
                                                  options_.peers[(options_.rank + 1) % options_.size], ")")
                                   : ""),
      prev_name_(options_.size > 1
                     ? absl::StrCat("rank ", (options_.rank + options_.size - 1) % options_.size, " (",
                                    options_.peers[(options_.rank + options_.size - 1) % options_.size], ")")
                     : ""),
      scratch_(options_.chunk_bytes / sizeof(float)) {}

TcpRingCollective::~TcpRingCollective() = default;

void TcpRingCollective::Abort() {
  aborted_.store(true);
  char b = 1;
  (void)!::write(wake_write_.get(), &b, 1);
  // Peers learn at once; the fds stay open (closed by the destructor) so a
  // call in flight never sees a reused descriptor.
  if (next_.valid()) ::shutdown(next_.get(), SHUT_RDWR);
  if (prev_.valid()) ::shutdown(prev_.get(), SHUT_RDWR);
}

absl::Status TcpRingCollective::Broken() {
  absl::MutexLock lock(&mu_);
  if (broken_.ok() && aborted_.load()) broken_ = absl::AbortedError("collective aborted");
  return broken_;
}

absl::Status TcpRingCollective::Fail(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = status;
  }
  // Tear down the ring so the neighbours fail promptly too.
  if (next_.valid()) ::shutdown(next_.get(), SHUT_RDWR);
  if (prev_.valid()) ::shutdown(prev_.get(), SHUT_RDWR);
  return status;
}

absl::Status TcpRingCollective::AllReduceSum(float* data, size_t n) {
  absl::Status broken = Broken();
  if (!broken.ok()) return broken;
  const uint64_t seq = seq_++;
  const int N = options_.size, r = options_.rank;
  if (N == 1 || n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckBuffer(data, n, N));
  Plan plan;
  PutHeader(plan.header, kAllReduceSum, seq, n, -1);
  auto seg = [&](int j) {
    j = ((j % N) + N) % N;
    size_t begin = n * j / N, end = n * (j + 1) / N;
    return Plan::Seg{reinterpret_cast<char*>(data + begin), (end - begin) * sizeof(float)};
  };
  // Reduce-scatter: step t sends segment r-t and adds segment r-t-1; rank r
  // ends owning segment r+1. All-gather: step s forwards segment r+1-s and
  // stores segment r-s.
  for (int t = 0; t < N - 1; ++t) {
    plan.sends.push_back(seg(r - t));
    plan.recvs.push_back(seg(r - t - 1));
  }
  for (int s = 0; s < N - 1; ++s) {
    plan.sends.push_back(seg(r + 1 - s));
    plan.recvs.push_back(seg(r - s));
  }
  plan.reduce_steps = N - 1;
  plan.dep_shift = -1;
  return Execute(plan);
}

absl::Status TcpRingCollective::Broadcast(float* data, size_t n, int root) {
  const int N = options_.size, r = options_.rank;
  if (root < 0 || root >= N) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank of ", N));
  }
  absl::Status broken = Broken();
  if (!broken.ok()) return broken;
  const uint64_t seq = seq_++;
  if (N == 1 || n == 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckBuffer(data, n, N));
  // A chain root -> root+1 -> ... -> root-1, pipelined by chunks: each rank
  // forwards what it has received so far.
  Plan plan;
  PutHeader(plan.header, kBroadcast, seq, n, root);
  const Plan::Seg all{reinterpret_cast<char*>(data), n * sizeof(float)};
  if (r != root) plan.recvs.push_back(all);
  if ((r + 1) % N != root) plan.sends.push_back(all);
  plan.reduce_steps = 0;
  plan.dep_shift = r == root ? -1 : 0;
  return Execute(plan);
}

absl::Status TcpRingCollective::Execute(const Plan& plan) {
  absl::Status st = Transfer(plan);
  if (!st.ok()) return Fail(aborted_.load() ? absl::AbortedError("collective aborted") : st);
  return st;
}

absl::Status TcpRingCollective::Transfer(const Plan& plan) {
  const size_t chunk = options_.chunk_bytes;
  char* scratch = reinterpret_cast<char*>(scratch_.data());
  // Send side: header bytes sent, then step si at offset so.
  size_t hs = plan.sends.empty() ? kHeader : 0, si = 0, so = 0;
  // Receive side: header bytes received, then step ri: ro bytes received,
  // rc bytes committed (reduced into or copied to data).
  unsigned char peer_header[kHeader];
  size_t hr = plan.recvs.empty() ? kHeader : 0, ri = 0, ro = 0, rc = 0;
  const size_t S = plan.sends.size(), R = plan.recvs.size();
  absl::Time last_progress = absl::Now();
  // Set when a socket said EAGAIN; cleared when poll says it is ready, so a
  // blocked side costs no system calls while the other one moves.
  bool out_blocked = false, in_blocked = false;

  for (;;) {
    while (si < S && so == plan.sends[si].bytes) ++si, so = 0;
    while (ri < R && ro == plan.recvs[ri].bytes) ++ri, ro = rc = 0;
    const bool send_done = hs == kHeader && si == S;
    const bool recv_done = hr == kHeader && ri == R;
    if (send_done && recv_done) return absl::OkStatus();
    if (aborted_.load(std::memory_order_relaxed)) return absl::AbortedError("collective aborted");

    // How far the current send step may go.
    size_t send_limit = 0;
    if (!send_done) {
      if (hs < kHeader) {
        send_limit = kHeader;
      } else {
        const long dep = static_cast<long>(si) + plan.dep_shift;
        send_limit = dep < 0 || static_cast<size_t>(dep) < ri ? plan.sends[si].bytes
                     : static_cast<size_t>(dep) == ri      ? rc
                                                           : 0;
      }
    }
    bool progress = false;
    const bool want_out = !send_done && (hs < kHeader ? hs : so) < send_limit;
    const bool want_in = !recv_done;
    if (want_out && !out_blocked) {
      const char* src = hs < kHeader ? reinterpret_cast<const char*>(plan.header) + hs : plan.sends[si].base + so;
      size_t len = std::min(send_limit - (hs < kHeader ? hs : so), 4 * chunk);
      ssize_t k = ::send(next_.get(), src, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        (hs < kHeader ? hs : so) += static_cast<size_t>(k);
        progress = true;
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return absl::UnavailableError(absl::StrCat("send to ", next_name_, ": ", ErrnoText(errno)));
      } else {
        out_blocked = true;
      }
    }
    if (want_in && !in_blocked) {
      char* dst;
      size_t len;
      const bool reduce = hr == kHeader && ri < plan.reduce_steps;
      if (hr < kHeader) {
        dst = reinterpret_cast<char*>(peer_header) + hr;
        len = kHeader - hr;
      } else if (reduce) {
        dst = scratch + ro % chunk;
        len = std::min(chunk - ro % chunk, plan.recvs[ri].bytes - ro);
      } else {
        dst = plan.recvs[ri].base + ro;
        len = std::min(plan.recvs[ri].bytes - ro, chunk);
      }
      ssize_t k = ::recv(prev_.get(), dst, len, MSG_DONTWAIT);
      if (k > 0) {
        progress = true;
        if (hr < kHeader) {
          hr += static_cast<size_t>(k);
          if (hr == kHeader && std::memcmp(peer_header, plan.header, kHeader) != 0) {
            return absl::FailedPreconditionError(absl::StrCat(
                prev_name_, " called a different collective (operation, sequence number, size or root)"));
          }
        } else if (reduce) {
          ro += static_cast<size_t>(k);
          const size_t upto = ro / sizeof(float) * sizeof(float);
          AddFloats(reinterpret_cast<float*>(plan.recvs[ri].base + rc),
                    reinterpret_cast<const float*>(scratch + rc % chunk), (upto - rc) / sizeof(float));
          rc = upto;
        } else {
          ro += static_cast<size_t>(k);
          rc = ro;
        }
      } else if (k == 0) {
        return absl::UnavailableError(absl::StrCat(prev_name_, " closed the connection"));
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return absl::UnavailableError(absl::StrCat("recv from ", prev_name_, ": ", ErrnoText(errno)));
      } else {
        in_blocked = true;
      }
    }
    if (progress) {
      last_progress = absl::Now();
      continue;
    }
    // Nothing moved: wait for the sockets, the abort pipe or the deadline.
    // While this rank still owes rank+1 bytes, the send socket is also
    // watched for input: rank+1 never sends on it, so readability there
    // means it closed or reset. Once everything is sent, rank+1 may finish
    // and close first; that is no error.
    pollfd fds[3] = {{wake_read_.get(), POLLIN, 0},
                     {send_done ? -1 : next_.get(), static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0},
                     {recv_done ? -1 : prev_.get(), static_cast<short>(want_in ? POLLIN : 0), 0}};
    const absl::Duration left = last_progress + options_.timeout - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no progress for ", absl::FormatDuration(options_.timeout), " waiting to ",
          !recv_done ? absl::StrCat("receive from ", prev_name_) : absl::StrCat("send to ", next_name_)));
    }
    int rcp = ::poll(fds, 3, static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000)));
    if (rcp < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno)));
    if (rcp > 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) out_blocked = false;
    if (rcp > 0 && (fds[2].revents & (POLLIN | POLLERR | POLLHUP))) in_blocked = false;
    if (rcp > 0 && (fds[1].revents & (POLLIN | POLLERR | POLLHUP))) {
      char b;
      ssize_t k = ::recv(next_.get(), &b, 1, MSG_DONTWAIT);
      if (k == 0) return absl::UnavailableError(absl::StrCat(next_name_, " closed the connection"));
      if (k > 0) return absl::DataLossError(absl::StrCat(next_name_, " sent bytes on the send-only link"));
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return absl::UnavailableError(absl::StrCat("link to ", next_name_, ": ", ErrnoText(errno)));
      }
    }
  }
}

}  // namespace psrt
