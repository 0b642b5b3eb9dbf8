// TcpRingCollective: bandwidth-optimal ring all-reduce over plain TCP.
//
// Rank r keeps two connections: it connects to rank r+1 (its "next", where
// it sends) and accepts one from rank r-1 (its "prev", where it receives).
// AllReduceSum is a reduce-scatter then an all-gather over N segments, each
// streamed in chunks so that sending chunk k overlaps receiving and reducing
// chunk k-1 (one thread, non-blocking sockets and poll). Segment j is summed
// in ring order starting at rank j, (((x_j + x_{j+1}) + x_{j+2}) + ...), and
// the all-gather copies the finished bytes, so every rank ends with the same
// bits.
//
// Forming the group: every rank first binds a CollectiveListener (so its
// port can be reported to the chief), then calls Create with every rank's
// address. Create retries the connect with backoff until
// `connect_timeout` (peers start at different times; each connect attempt
// is bounded on its own). The handshake checks magic, version, group size,
// ranks and group_id; a connection of another group incarnation is closed
// and skipped. Both sides prove they hold `token` (HMAC-SHA256 over both
// nonces, group_id and ranks), the connector first: the listening side
// tells a connection nothing of the group before that (ring_handshake.h).
// A wrong token fails Create with UNAUTHENTICATED naming the peer.
//
// Threads: AllReduceSum/Broadcast from one thread at a time; Abort from
// any thread while the object is alive (the destructor must not race a
// call or an Abort). Everything a peer sends is validated (per-call headers name
// the operation, sequence number and size), nothing waits without a
// deadline, and SIGPIPE is never raised (MSG_NOSIGNAL).
//
//   ASSIGN_OR_RETURN(auto listener, CollectiveListener::Bind("0.0.0.0", 0));
//   ReportPortToChief(listener->port());                   // chief answers with peers
//   TcpRingOptions o;
//   o.rank = r; o.size = n; o.peers = peers; o.group_id = gid; o.token = tok;
//   ASSIGN_OR_RETURN(auto ring, TcpRingCollective::Create(listener.get(), o));
//   RETURN_IF_ERROR(ring->AllReduceSum(grads, count));
#ifndef PSRT_COMMON_COLLECTIVE_TCP_RING_H_
#define PSRT_COMMON_COLLECTIVE_TCP_RING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/collective/collective.h"
#include "common/net/socket.h"

namespace psrt {

struct TcpRingOptions {
  int rank = 0;
  int size = 1;
  std::vector<std::string> peers;  // host:port of every rank's listener, by rank
  uint64_t group_id = 0;           // group incarnation: a connection of another group is refused
  std::string token;               // shared secret, may be empty
  absl::Duration timeout = absl::Seconds(10);          // no progress this long => DEADLINE_EXCEEDED
  absl::Duration connect_timeout = absl::Seconds(30);  // forming the group
  // Tuning (the defaults are what tests/bench/allreduce_bench measured best).
  size_t chunk_bytes = 512 << 10;    // pipelining unit (receive/reduce piece); a multiple of 4, >= 4 KiB
  // SO_SNDBUF/SO_RCVBUF; 0 = kernel autotuning. The kernel caps it at
  // net.core.{w,r}mem_max (4 MiB on our hosts, 208 KiB on a stock kernel).
  int socket_buffer_bytes = 4 << 20;
};

// A bound, listening socket. Bind it before the group forms so its port can
// be reported; it outlives any number of Create calls (a re-formed group
// may reuse it). Not thread-safe; one Create at a time may use it.
class CollectiveListener {
 public:
  // Binds host:port (port 0: any free port) and listens.
  static absl::StatusOr<std::unique_ptr<CollectiveListener>> Bind(const std::string& host, int port);
  int port() const { return port_; }
  // The listening socket (non-blocking), for TcpRingCollective::Create and
  // benchmarks; still owned by this object.
  int fd() const { return fd_.get(); }

 private:
  CollectiveListener(net::Fd fd, int port) : fd_(std::move(fd)), port_(port) {}
  net::Fd fd_;
  int port_;
};

class TcpRingCollective : public Collective {
 public:
  // Forms the ring: connects to rank+1 and accepts rank-1 on `listener`
  // (not owned; may be null only when size == 1). Errors: INVALID_ARGUMENT
  // for bad options, UNAUTHENTICATED for a wrong token, DEADLINE_EXCEEDED
  // when the neighbours did not join within connect_timeout (the message
  // says the last thing that went wrong). Success means this rank's two
  // links are up; a neighbour whose own Create failed shows up as
  // UNAVAILABLE on the first call.
  static absl::StatusOr<std::unique_ptr<TcpRingCollective>> Create(CollectiveListener* listener,
                                                                   TcpRingOptions options);
  ~TcpRingCollective() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  absl::Status AllReduceSum(float* data, size_t n) override;
  absl::Status Broadcast(float* data, size_t n, int root) override;
  void Abort() override;

 private:
  struct Plan;  // what one call sends and receives (tcp_ring.cc)

  TcpRingCollective(TcpRingOptions options, net::Fd next, net::Fd prev,
                    net::Fd wake_read, net::Fd wake_write);
  // Runs one call's plan; on failure breaks the object and shuts the sockets.
  absl::Status Execute(const Plan& plan);
  absl::Status Transfer(const Plan& plan);
  absl::Status Fail(absl::Status status);
  absl::Status Broken();

  // Constant after construction.
  const TcpRingOptions options_;
  const net::Fd next_;        // sends to rank+1
  const net::Fd prev_;        // receives from rank-1
  const net::Fd wake_read_;   // Abort() writes to wake_write_
  const net::Fd wake_write_;
  const std::string next_name_, prev_name_;   // "rank 2 (host:port)"

  // Used only by the calling thread.
  uint64_t seq_ = 0;
  std::vector<float> scratch_;  // one chunk being received for the reduce-scatter

  std::atomic<bool> aborted_{false};
  absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_COMMON_COLLECTIVE_TCP_RING_H_
