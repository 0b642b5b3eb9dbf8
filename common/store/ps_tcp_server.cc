#include "common/store/ps_tcp_server.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/store/ps_service.h"
#include "common/transport/tcp_frame.h"
#include "common/transport/tcp_frame_io.h"
#include "glog/logging.h"

namespace psrt {

struct PsTcpServer::Connection {
  uint64_t id = 0;
  std::thread::id reader;  // the thread serving it, once admitted
  net::Fd fd;
  std::string peer;  // "127.0.0.1:51234", for messages
  // Made (under the server's mu_) once its hello is accepted: a connection
  // awaiting its hello costs no thread (1,024 of them took 80 MB with two
  // threads each, 40 MB with one).
  std::unique_ptr<tcpframe::FrameWriter> writer;
  absl::Time accepted;
  // Its source's place while it has not authenticated; released once its
  // hello is accepted, or when it ends.
  std::optional<net::SourceLimit::Place> place;
  // Set (under the server's mu_) once its hello is accepted, or once it is
  // chosen to make room: neither may be evicted.
  bool admitted = false;
  bool evicting = false;
};

namespace {

// Accepts without a descriptor less than this apart are one episode (logged once).
constexpr absl::Duration kStarvedEpisode = absl::Seconds(1);

// The longest a pull may wait for its step (as the gRPC methods' cap).
constexpr absl::Duration kMaxPullWait = absl::Seconds(60);

std::string PeerName(const sockaddr_storage& a) {
  char host[64] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    port = ntohs(v6->sin6_port);
  }
  return absl::StrCat(host, ":", port);
}

// The store and epoch a frame names, checked as ReadReplicaHeader checks
// the same pair in a gRPC call's metadata.
absl::StatusOr<ReplicaHeader> FrameRoute(const tcpframe::Header& h) {
  ReplicaHeader r;
  if (h.store == -1 && h.epoch == 0 && !h.replica) return r;
  if (h.store < 0 || h.epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame names store ", h.store, " and epoch ", h.epoch,
                     ": want a store of 0 or more and an epoch of 1 or more, or neither"));
  }
  r.present = true;
  r.store = h.store;
  r.epoch = h.epoch;
  r.replica = h.replica;
  return r;
}

// A refusal, on the acceptor's or the poller's thread: one attempt that
// never waits (the verdict is the first thing sent on the connection, so a
// peer cannot have filled its send buffer), best effort.
void WriteRefusal(int fd, const grpc::Status& s) {
  std::string v = tcpframe::EncodeVerdict(s);
  (void)::send(fd, v.data(), v.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The answer to a hello; best effort (a peer that does not read it is gone).
void WriteVerdict(int fd, const grpc::Status& s, const std::string& peer) {
  std::string v = tcpframe::EncodeVerdict(s);
  (void)net::IoExact(fd, v.data(), v.size(), /*write=*/true, absl::Now() + absl::Seconds(1), nullptr, peer);
}

}  // namespace

int DataPlaneConnectionCap(int configured, uint64_t soft_limit) {
  const uint64_t reserve = std::max<uint64_t>(128, soft_limit / 4);
  const uint64_t left = soft_limit > reserve ? soft_limit - reserve : 0;
  return static_cast<int>(std::min<uint64_t>(configured, std::max<uint64_t>(8, left)));
}

absl::StatusOr<std::unique_ptr<PsTcpServer>> PsTcpServer::Start(PsServiceImpl* service, PsTcpServerOptions options) {
  rlimit fds{};
  if (::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur != RLIM_INFINITY) {
    const int cap = DataPlaneConnectionCap(options.max_connections, fds.rlim_cur);
    if (cap < options.max_connections) {
      LOG(INFO) << "TCP data plane: at most " << cap << " connections (not " << options.max_connections
                << "): the descriptor limit is " << fds.rlim_cur << ", and gRPC needs its share";
      options.max_connections = cap;
    }
  }
  absl::StatusOr<net::Listener> l = net::Listen(options.host, options.port, 0);
  if (!l.ok()) {
    return absl::Status(l.status().code(), absl::StrCat("TCP data plane: ", l.status().message()));
  }
  const int port = l->port;
  std::unique_ptr<PsTcpServer> s(new PsTcpServer(service, std::move(options), std::move(l->fd), port));
  absl::StatusOr<std::unique_ptr<HelloPoller>> poller = HelloPoller::Start(
      tcpframe::kHelloBytes,
      [p = s.get()](uint64_t id, absl::StatusOr<std::string> hello) { p->OnHello(id, std::move(hello)); });
  if (!poller.ok()) {
    return absl::Status(poller.status().code(), absl::StrCat("TCP data plane: ", poller.status().message()));
  }
  s->poller_ = *std::move(poller);
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

PsTcpServer::PsTcpServer(PsServiceImpl* service, PsTcpServerOptions options, net::Fd listener, int port)
    : service_(service),
      options_(std::move(options)),
      listener_(std::move(listener)),
      port_(port),
      budget_(std::make_shared<tcpframe::ByteBudget>(options_.max_buffered_bytes)),
      per_source_(options_.max_unauthenticated_per_source, "TCP data plane (--max_unauthenticated_per_source)") {}

PsTcpServer::~PsTcpServer() { Shutdown(); }

absl::StatusOr<PsTcpServer::Ticket> PsTcpServer::IssueTicket(const Caller& caller, const std::string& key_in) {
  const std::string key = key_in.empty() ? caller.name : key_in;
  std::string bytes(tcpframe::kTicketBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(bytes.size())) != 1) {
    return absl::InternalError("RAND_bytes failed: no ticket for the TCP data plane");
  }
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  // A caller past its share, or a PS holding its most, drops its oldest
  // unused ticket (the caller's own first) instead of refusing: a worker
  // redeems its ticket within a round trip, so what is dropped is in
  // practice what was hoarded, and a hoarder sharing a worker's key (one
  // role token from one host) cannot lock that worker out for a ticket's
  // lifetime, as refusing did.
  absl::erase_if(tickets_, [now](const auto& t) { return t.second.expires <= now; });
  auto oldest = [&](bool same_key) {
    auto found = tickets_.end();
    for (auto it = tickets_.begin(); it != tickets_.end(); ++it) {
      if (same_key && it->second.key != key) continue;
      if (found == tickets_.end() || it->second.expires < found->second.expires) found = it;
    }
    return found;
  };
  int mine = 0;
  for (const auto& [b, t] : tickets_) mine += t.key == key ? 1 : 0;
  if (mine >= options_.max_tickets_per_caller || static_cast<int>(tickets_.size()) >= options_.max_tickets) {
    auto victim = oldest(/*same_key=*/mine >= options_.max_tickets_per_caller);
    if (victim != tickets_.end()) tickets_.erase(victim);
    ++tickets_dropped_;
    LOG_EVERY_N(WARNING, 100) << "TCP data plane: " << key << " asked for a ticket with " << mine << " unused (of "
                              << options_.max_tickets_per_caller << " a caller, " << tickets_.size() + 1 << " of "
                              << options_.max_tickets << " in all); dropped the oldest (" << tickets_dropped_
                              << " so far)";
  }
  tickets_[bytes] = Issued{caller, key, now + options_.ticket_ttl};
  return Ticket{std::move(bytes), options_.ticket_ttl};
}

absl::StatusOr<Caller> PsTcpServer::Redeem(const std::string& ticket) {
  absl::MutexLock lock(&mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) {
    return absl::UnauthenticatedError("unknown data-plane ticket (used already, or never issued by this PS)");
  }
  Issued issued = std::move(it->second);
  tickets_.erase(it);
  if (issued.expires <= absl::Now()) return absl::UnauthenticatedError("expired data-plane ticket");
  return issued.caller;
}

int PsTcpServer::connections() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(open_.size());
}

int64_t PsTcpServer::evicted() const {
  absl::MutexLock lock(&mu_);
  return evicted_;
}

bool PsTcpServer::EvictOldestUnauthenticatedLocked() {
  std::shared_ptr<Connection> oldest;
  for (const auto& [id, c] : open_) {
    if (c->admitted || c->evicting) continue;
    if (oldest == nullptr || c->accepted < oldest->accepted) oldest = c;
  }
  if (oldest == nullptr) return false;
  oldest->evicting = true;
  ++evicted_;
  // Wakes its reader out of the hello (EOF); its thread writes no verdict
  // that matters and leaves open_.
  ::shutdown(oldest->fd.get(), SHUT_RDWR);
  LOG_EVERY_N(WARNING, 100) << "TCP data plane: " << options_.max_connections << " connections open; ended "
                            << oldest->peer << ", the oldest still without its hello, to make room (" << evicted_
                            << " so far)";
  return true;
}

void PsTcpServer::OnOutOfDescriptors(int error, absl::Time* last_starved) {
  ++out_of_descriptors_;
  bool shed = false;
  int open = 0;
  {
    absl::MutexLock lock(&mu_);
    shed = EvictOldestUnauthenticatedLocked();
    open = static_cast<int>(open_.size());
  }
  const absl::Time now = absl::Now();
  if (now - *last_starved > kStarvedEpisode) {
    LOG(WARNING) << "TCP data plane: out of file descriptors (" << std::strerror(error) << ") with " << open
                 << " connections open: ending the oldest still without its hello for each newcomer, or with "
                    "none, not accepting for 100 ms at a time";
  }
  *last_starved = now;
  // The shed connection's descriptor closes once the poller has seen it end.
  absl::SleepFor(shed ? absl::Milliseconds(10) : absl::Milliseconds(100));
}

void PsTcpServer::AcceptLoop() {
  // The last accept without a descriptor: an episode is logged when it
  // begins and once accepts have gone through for kStarvedEpisode.
  absl::Time last_starved = absl::InfinitePast();
  while (!stop_.load()) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    net::Fd fd(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC));
    if (!fd.valid()) {
      // EMFILE leaves the connection queued and the listener readable: shed
      // or wait, never spin. EAGAIN (another accept took it), ECONNABORTED: go on.
      if (errno == EMFILE || errno == ENFILE) OnOutOfDescriptors(errno, &last_starved);
      continue;
    }
    if (last_starved != absl::InfinitePast() && absl::Now() - last_starved > kStarvedEpisode) {
      last_starved = absl::InfinitePast();
      LOG(INFO) << "TCP data plane: accepting again (" << out_of_descriptors_.load()
                << " accepts without a descriptor so far)";
    }
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_shared<Connection>();
    c->peer = PeerName(addr);
    c->accepted = absl::Now();
    const std::string source = net::SourceAddress(addr);
    c->place = per_source_.Take(source);
    if (!c->place.has_value()) {
      // Refused before it costs a thread or a slot.
      const std::string line = per_source_.Refuse(source);
      if (!line.empty()) LOG(WARNING) << line;
      WriteRefusal(fd.get(), grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                          absl::StrCat("this address holds ", options_.max_unauthenticated_per_source,
                                                       " data-plane connections without a hello already")));
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stop_.load()) return;
      int evicting = 0;
      for (const auto& [id, o] : open_) evicting += o->evicting ? 1 : 0;
      if (static_cast<int>(open_.size()) - evicting >= options_.max_connections &&
          !EvictOldestUnauthenticatedLocked()) {
        LOG_EVERY_N(WARNING, 100) << "TCP data plane: refused a connection from " << c->peer << ": "
                                  << options_.max_connections << " open already";
        WriteRefusal(fd.get(), grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                            "the PS serves its most data-plane connections already"));
        continue;
      }
      c->id = next_id_++;
      c->fd = std::move(fd);
      open_[c->id] = c;
    }
    // Its fd stays open until the poller has reported it (OnHello).
    poller_->Add(c->id, c->fd.get(), c->accepted + options_.hello_timeout);
  }
}

void PsTcpServer::OnHello(uint64_t id, absl::StatusOr<std::string> hello) {
  std::shared_ptr<Connection> c;
  {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(id);
    if (it == open_.end()) return;  // a bug of ours; nothing to answer
    c = it->second;
  }
  absl::StatusOr<Caller> caller = absl::UnauthenticatedError("no hello");
  if (hello.status().code() == absl::StatusCode::kDeadlineExceeded) {
    caller = absl::DeadlineExceededError(
        absl::StrCat("no data-plane hello within ", absl::FormatDuration(options_.hello_timeout)));
  } else if (!hello.ok()) {
    caller = hello.status();  // closed, reset or ended to make room; CANCELLED at shutdown
  } else if (hello->size() != tcpframe::kHelloBytes) {
    caller = absl::InternalError("a hello of the wrong size");  // HelloPoller's contract
  } else {
    absl::StatusOr<std::string> ticket = tcpframe::DecodeHello(reinterpret_cast<const uint8_t*>(hello->data()));
    caller = ticket.ok() ? Redeem(*ticket) : ticket.status();
  }
  if (caller.ok()) {
    {
      absl::MutexLock lock(&mu_);
      if (c->evicting) caller = absl::UnavailableError("ended to make room");
      if (stop_.load()) caller = absl::CancelledError("the PS is shutting down");
      c->admitted = caller.ok();
      if (caller.ok()) {
        c->writer = std::make_unique<tcpframe::FrameWriter>(c->fd.get(), c->peer, options_.send_timeout,
                                                            options_.max_queued_answers);
      }
    }
    if (caller.ok()) {
      c->place->Release();  // authenticated: counts against its source no more
      DataCaller who;
      who.caller = *caller;
      who.key = IdentityKey(who.caller, absl::StrCat("data-plane connection ", c->peer));
      std::thread([this, c, who] { Serve(c, who); }).detach();
      return;
    }
  }
  if (!stop_.load()) {
    LOG_EVERY_N(WARNING, 20) << "TCP data plane: refused " << c->peer << ": " << caller.status().message();
    WriteRefusal(c->fd.get(), grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(caller.status().message())));
  }
  c->place.reset();
  absl::MutexLock lock(&mu_);
  open_.erase(id);  // closes it
}

void PsTcpServer::Serve(const std::shared_ptr<Connection>& c, const DataCaller& who) {
  c->reader = std::this_thread::get_id();
  WriteVerdict(c->fd.get(), grpc::Status::OK, c->peer);
  {
    tcpframe::FrameReader reader(c->fd.get(), pool_, options_.max_request_bytes, c->peer, budget_,
                                 options_.frame_deadlines);
    bool corked = false;
    while (!stop_.load()) {
      // Answers to the frames already read go out together once no more
      // are buffered (before the next read may block).
      if (corked && !reader.buffered()) {
        c->writer->Uncork();
        corked = false;
      }
      std::shared_ptr<TensorBuffer> body;
      absl::StatusOr<tcpframe::Header> oversized = absl::UnknownError("");
      absl::Status s = reader.Next(&body, &oversized, /*response=*/false);
      if (!s.ok() && s.code() == absl::StatusCode::kResourceExhausted && oversized.ok()) {
        tcpframe::Header h;
        h.response = true;
        h.code = grpc::StatusCode::RESOURCE_EXHAUSTED;
        h.call_id = oversized->call_id;
        c->writer->Send(tcpframe::Encode(h, std::string(s.message()), grpc::ByteBuffer()));
        continue;
      }
      if (!s.ok()) {  // gone, stalled, or a frame we cannot skip safely
        if (s.code() == absl::StatusCode::kDeadlineExceeded) {
          LOG_EVERY_N(WARNING, 20) << "TCP data plane: closing " << c->peer << ": " << s.message();
        }
        break;
      }
      if (!corked && reader.buffered()) {
        c->writer->Cork();
        corked = true;
      }
      tcpframe::Header h;
      std::string unused;
      grpc::ByteBuffer payload;
      absl::Status bad = tcpframe::DecodeBody(body, /*response=*/false, &h, &unused, &payload);
      if (!bad.ok()) {
        LOG_EVERY_N(WARNING, 20) << "TCP data plane: closing " << c->peer << ": " << bad.message();
        break;
      }
      const absl::Time deadline = absl::Now() + std::min(absl::Milliseconds(h.timeout_ms), kMaxPullWait);
      const uint64_t call = h.call_id;
      // A replicated job's frame names its store and epoch.
      const DataCaller* as = &who;
      DataCaller routed;
      if (h.store != -1 || h.epoch != 0 || h.replica) {
        routed = who;
        routed.header = FrameRoute(h);
        as = &routed;
      }
      // The answer may come later, from another thread (a parked pull, or
      // a primary waiting for its backup): it holds the connection; once
      // closed, Send drops it.
      service_->ServeDataAs(*as, h.method, payload, deadline,
                            [c, call](grpc::Status st, grpc::ByteBuffer b, std::shared_ptr<void> hold) {
                              tcpframe::Header r;
                              r.response = true;
                              r.code = st.error_code();
                              r.call_id = call;
                              std::unique_ptr<tcpframe::OutFrame> frame =
                                  tcpframe::Encode(r, st.ok() ? std::string() : st.error_message(), b);
                              frame->Hold(std::move(hold));  // the call's slots, until the answer is out
                              // Answered inline by the connection's reader, which may as well wait
                              // for the socket itself (it reads nothing meanwhile); from another
                              // thread (a parked pull released by a push), never wait.
                              c->writer->Send(std::move(frame), /*may_wait=*/std::this_thread::get_id() == c->reader);
                            });
    }
    if (corked) c->writer->Uncork();
    if (c->writer->overflowed()) {
      LOG_EVERY_N(WARNING, 20) << "TCP data plane: closed " << c->peer << ": it left " << options_.max_queued_answers
                               << " answers unread";
    }
  }
  c->writer->Close();
  c->place.reset();  // now: answers still parked may keep `c` past this server
  // What this connection's requests left idle in the pool goes back past
  // the bound, and the allocator returns it to the system.
  // So does what its unread answers held (an admitted connection's close
  // is rare; a flood of pulls it never read left hundreds of MB cached).
  pool_->Trim(options_.pool_idle_bytes_after_close);
  ::malloc_trim(0);
  absl::MutexLock lock(&mu_);
  open_.erase(c->id);  // the last thing this thread does with `this`
}

void PsTcpServer::Shutdown() {
  if (stop_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  // Every connection still awaiting its hello is reported CANCELLED, and
  // closed without a verdict; the rest are admitted.
  if (poller_ != nullptr) poller_->Shutdown();
  std::vector<std::shared_ptr<Connection>> open;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, c] : open_) open.push_back(c);
  }
  // Wakes each connection's reader (and any sender): their threads end.
  for (const auto& c : open) {
    absl::MutexLock lock(&mu_);
    if (c->writer != nullptr) {
      c->writer->Close();
    } else {
      ::shutdown(c->fd.get(), SHUT_RDWR);
    }
  }
  absl::MutexLock lock(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&none), absl::Seconds(10))) {
    LOG(WARNING) << "TCP data plane: " << open_.size() << " connections did not end within 10 s of shutdown";
  }
}

}  // namespace psrt
