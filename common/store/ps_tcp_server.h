// PsTcpServer: the PS's end of the data plane over plain TCP
// (common/transport/tcp_frame.h). It serves Pull, PullRows, Push and
// PushRows frames through PsServiceImpl::ServeDataAs: the same checks,
// limits, per-method authorisation and core as the gRPC methods.
//
// A connection is admitted by the ticket its hello carries: the PS issued
// it (IssueTicket) to an OpenDataPlane call on its authenticated gRPC
// service, so the connection has that call's identity and roles. A ticket
// works once, within its time to live; a hello that does not come within
// `hello_timeout`, or carries another ticket, is refused and closed.
//
// Identity before resources: a source address (without its port) may hold
// at most `max_unauthenticated_per_source` connections that have not sent
// a valid hello yet; more are refused at once (RESOURCE_EXHAUSTED verdict,
// a rate-limited log line). Once admitted a connection counts no more.
// When every one of `max_connections` is taken, a new connection evicts the
// oldest one still awaiting its hello, so strangers from many addresses
// delay a worker's connection by at most its hello, never lock it out.
//
// Nothing a caller has not authenticated holds a thread: every connection
// awaiting its hello is held by one poller thread (HelloPoller), which reads
// the hellos as their bytes come and ends each whose whole hello is not in
// by `hello_timeout` after its accept. Once its ticket is accepted, each
// connection has one thread that reads its frames (blocking) and serves
// each in turn; a pull that must wait (SYNC, bounded staleness)
// parks in the core and is answered later from another thread, so it does
// not hold up the frames behind it. Answers to the frames of one read go
// out in one send. A malformed frame ends the connection (the client's
// calls on it fail and it reconnects), and so does one that stalls or
// trickles once begun; a frame over the size limit, or that outgrows the
// shared budget, is answered RESOURCE_EXHAUSTED and skipped, as a unary
// call would be.
//
// Not encrypted: the PS offers it only without TLS unless told otherwise
// (ps/server_main.cc's --tcp_data_plane).
//
//   ASSIGN_OR_RETURN(auto tcp, PsTcpServer::Start(&service, {.host = "0.0.0.0"}));
//   service.set_tcp_server(tcp.get());
//   ...
//   tcp->Shutdown();  // before the service and core go
//
// Thread-safe.
#ifndef PSRT_COMMON_STORE_PS_TCP_SERVER_H_
#define PSRT_COMMON_STORE_PS_TCP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_pool.h"
#include "common/net/socket.h"
#include "common/net/source_limit.h"
#include "common/rpc/roles.h"
#include "common/store/hello_poller.h"
#include "common/transport/tcp_frame_io.h"

namespace psrt {

class PsServiceImpl;
struct DataCaller;

struct PsTcpServerOptions {
  std::string host;  // listen here ("" = every interface)
  int port = 0;      // 0 = any free port
  // Connections served at once, admitted or not; a newcomer past it ends
  // the oldest one still awaiting its hello, or is refused when there is none.
  // Start lowers it to what the descriptor limit leaves (DataPlaneConnectionCap).
  int max_connections = 1024;
  // Connections one source address may hold that have not sent a valid
  // hello yet; more are refused. 0: no limit.
  int max_unauthenticated_per_source = 64;
  // Tickets issued and not yet used; past it a new one drops the oldest.
  int max_tickets = 4096;
  // ...and per caller (IssueTicket's key): past it a new one drops that
  // caller's oldest.
  int max_tickets_per_caller = 64;
  absl::Duration ticket_ttl = absl::Seconds(30);
  absl::Duration hello_timeout = absl::Seconds(10);
  // Frames larger than this are answered RESOURCE_EXHAUSTED and skipped.
  uint64_t max_request_bytes = uint64_t{1} << 30;
  // Bytes of large requests (over 64 KiB) held at once across every
  // connection, charged as they arrive (a MiB ahead, not whole when
  // announced); a frame that outgrows it is answered RESOURCE_EXHAUSTED and
  // the rest of it skipped, and one that could never fit is refused
  // before it is allocated.
  uint64_t max_buffered_bytes = uint64_t{2} << 30;
  // A request begun and then stalled (or trickled) ends its connection and
  // gives back what it was charged (tcpframe::FrameDeadlines: 30 s idle,
  // or slower than 64 KiB/s once 60 s old).
  tcpframe::FrameDeadlines frame_deadlines;
  // A client that takes none of its answers for this long is disconnected,
  // and so is one that does not take a whole answer within this and a
  // second per MiB of it (tcpframe::FrameWriter).
  absl::Duration send_timeout = absl::Seconds(60);
  // ...and one that leaves this many answers unsent is disconnected at once
  // (tcpframe::FrameWriter's max_queued_frames): a worker has at most a few
  // thousand calls in flight (--max_inflight_per_caller pulls and as many pushes, 1024 each by default).
  size_t max_queued_answers = 4096;
  // Idle request buffers the pool keeps once a connection has closed; the
  // rest goes back to the system (a burst of large frames left its buffers
  // cached for good).
  size_t pool_idle_bytes_after_close = size_t{64} << 20;
};

// The most data-plane connections a process whose descriptor soft limit is
// `soft_limit` may hold: `configured`, or fewer so that a quarter of the
// limit (at least 128) stays for gRPC, RocksDB and the rest of the process;
// never lowered below 8. Past the limit gRPC 1.51 stops accepting for good, so the
// data plane must never be what exhausts it.
int DataPlaneConnectionCap(int configured, uint64_t soft_limit);

class PsTcpServer {
 public:
  // Listens and starts accepting. `service` is not owned and outlives this
  // server's Shutdown.
  static absl::StatusOr<std::unique_ptr<PsTcpServer>> Start(PsServiceImpl* service, PsTcpServerOptions options);
  ~PsTcpServer();  // Shutdown()

  int port() const { return port_; }

  struct Ticket {
    std::string bytes;  // tcpframe::kTicketBytes
    absl::Duration ttl;
  };
  // A ticket admitting one connection as `caller`.
  // `key` is who the ticket counts against (IdentityKey: the caller's
  // authenticated task, else its identity and address): at most
  // max_tickets_per_caller unused ones each, and max_tickets in all; a
  // ticket past either drops the oldest unused one (the caller's own
  // first), so hoarded tickets cannot lock anyone out. Empty: the caller's
  // name.
  absl::StatusOr<Ticket> IssueTicket(const Caller& caller, const std::string& key = "");

  // Connections open now (admitted or awaiting their hello).
  int connections() const;
  // Connections refused because their source held its most unauthenticated
  // ones, and unauthenticated ones evicted for a newcomer, since Start.
  int64_t refused_per_source() const { return per_source_.refused(); }
  int64_t evicted() const;
  // Accepts that failed for want of a descriptor (EMFILE, ENFILE) since
  // Start. Each sheds the oldest connection awaiting its hello, or with
  // none, leaves the listener alone for 100 ms rather than spin on it.
  int64_t out_of_descriptors() const { return out_of_descriptors_.load(); }
  // Bytes of large requests charged to max_buffered_bytes now.
  uint64_t buffered_bytes() const { return budget_->held(); }
  // Stops accepting, ends every connection and waits for their threads.
  // Answers to pulls still parked in the core are dropped. Idempotent.
  void Shutdown();

  struct Connection;

 private:
  PsTcpServer(PsServiceImpl* service, PsTcpServerOptions options, net::Fd listener, int port);
  void AcceptLoop();
  // After accept failed with `error` (EMFILE or ENFILE): sheds the oldest
  // connection awaiting its hello, or waits a while; logs when an episode
  // begins (*last_starved: the previous failure's time, set to now).
  void OnOutOfDescriptors(int error, absl::Time* last_starved);
  // On the poller's thread: admits connection `id` (its serving thread
  // starts) or refuses it (a verdict, and it is closed).
  void OnHello(uint64_t id, absl::StatusOr<std::string> hello);
  // The thread of an admitted connection: its verdict, then its frames.
  void Serve(const std::shared_ptr<Connection>& c, const DataCaller& who);
  // With every connection slot taken: ends the oldest connection still
  // awaiting its hello (its thread then leaves open_); false when every
  // open connection is admitted or already being evicted.
  bool EvictOldestUnauthenticatedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The caller a ticket was issued to; consumes it.
  absl::StatusOr<Caller> Redeem(const std::string& ticket);

  PsServiceImpl* const service_;
  const PsTcpServerOptions options_;
  const net::Fd listener_;
  const int port_;
  const std::shared_ptr<BufferPool> pool_ = BufferPool::Create();
  std::shared_ptr<tcpframe::ByteBudget> budget_;
  net::SourceLimit per_source_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> out_of_descriptors_{0};
  std::thread acceptor_;
  std::unique_ptr<HelloPoller> poller_;  // set by Start, before acceptor_

  mutable absl::Mutex mu_;
  struct Issued {
    Caller caller;
    std::string key;
    absl::Time expires;
  };
  absl::flat_hash_map<std::string, Issued> tickets_ ABSL_GUARDED_BY(mu_);
  // Open connections by id (their threads run until they end).
  absl::flat_hash_map<uint64_t, std::shared_ptr<Connection>> open_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tickets_dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PS_TCP_SERVER_H_
