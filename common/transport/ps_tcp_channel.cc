#include "common/transport/ps_tcp_channel.h"

#include <fcntl.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net/socket.h"
#include "common/rpc/status_util.h"
#include "common/rpc/unary_call.h"
#include "common/transport/tcp_frame.h"
#include "common/transport/tcp_frame_io.h"
#include "glog/logging.h"
#include "proto/ps_service.grpc.pb.h"

namespace psrt {
namespace {

// Ids of calls handed to the fallback stream carry this bit.
constexpr uint64_t kFallbackBit = uint64_t{1} << 63;

}  // namespace

class PsTcpChannel::Connection {
 public:
  Connection(std::shared_ptr<PendingCalls> state, uint64_t id, net::Fd fd, std::string peer,
             std::shared_ptr<BufferPool> pool, uint64_t max_response_bytes)
      : state_(std::move(state)),
        id_(id),
        fd_(std::move(fd)),
        peer_(std::move(peer)),
        pool_(std::move(pool)),
        max_response_bytes_(max_response_bytes),
        writer_(fd_.get(), peer_) {}

  // The reader thread holds `self` until it ends, so the connection lives as
  // long as its reader: closing one never waits for its callbacks (which may
  // be starting the next calls, on a new connection).
  void StartReader(std::shared_ptr<Connection> self) {
    state_->Opened();
    std::thread([self = std::move(self)] { self->ReadLoop(); }).detach();
  }
  uint64_t id() const { return id_; }
  bool broken() const { return broken_.load(); }
  bool Send(std::unique_ptr<tcpframe::OutFrame> frame) { return writer_.Send(std::move(frame)); }

  // Ends the connection: the socket is shut down, so its reader wakes and
  // fails the calls on it. Idempotent; does not wait for the reader.
  void Close() {
    broken_.store(true);
    writer_.Close();
  }

 private:
  void ReadLoop() {
    tcpframe::FrameReader reader(fd_.get(), pool_, max_response_bytes_, peer_);
    absl::Status why;
    bool corked = false;
    while (true) {
      // Calls started by the callbacks of one read's answers leave together.
      if (corked && !reader.buffered()) {
        writer_.Uncork();
        corked = false;
      }
      std::shared_ptr<TensorBuffer> body;
      absl::StatusOr<tcpframe::Header> oversized = absl::UnknownError("");
      absl::Status s = reader.Next(&body, &oversized, /*response=*/true);
      if (!s.ok() && s.code() == absl::StatusCode::kResourceExhausted && oversized.ok()) {
        PendingCalls::Call p = state_->Take(oversized->call_id);
        if (p.done) p.done(absl::ResourceExhaustedError(absl::StrCat(peer_, ": ", s.message())));
        continue;
      }
      if (!s.ok()) {
        why = s;
        break;
      }
      tcpframe::Header h;
      std::string message;
      grpc::ByteBuffer payload;
      absl::Status bad = tcpframe::DecodeBody(body, /*response=*/true, &h, &message, &payload);
      if (!bad.ok()) {
        why = absl::DataLossError(absl::StrCat("a malformed answer from ", peer_, ": ", bad.message()));
        break;
      }
      PendingCalls::Call p = state_->Take(h.call_id);
      if (p.done == nullptr) continue;  // the caller gave up on it already
      if (!corked && reader.buffered()) {
        writer_.Cork();
        corked = true;
      }
      if (h.code == grpc::StatusCode::OK) {
        p.done(std::move(payload));
      } else {
        p.done(FromGrpcStatus(grpc::Status(h.code, message), peer_, psframe::MethodName(p.method)));
      }
    }
    if (corked) writer_.Uncork();
    broken_.store(true);
    writer_.Close();
    const absl::Status failed = absl::UnavailableError(absl::StrCat(
        "connection to ", peer_, " ended (", why.message(), "); the call may or may not have been applied"));
    for (Done& d : state_->TakeAll(id_)) d(failed);
    state_->Gone();
  }

  const std::shared_ptr<PendingCalls> state_;
  const uint64_t id_;
  const net::Fd fd_;
  const std::string peer_;
  const std::shared_ptr<BufferPool> pool_;
  const uint64_t max_response_bytes_;
  tcpframe::FrameWriter writer_;
  std::atomic<bool> broken_{false};
};

PsTcpChannel::PsTcpChannel(std::shared_ptr<grpc::ChannelInterface> channel, std::string address, std::string peer,
                           PsTcpChannelOptions options)
    : channel_(std::move(channel)),
      address_(std::move(address)),
      peer_(std::move(peer)),
      options_(options),
      state_(std::make_shared<PendingCalls>()) {}

PsTcpChannel::~PsTcpChannel() {
  std::shared_ptr<Connection> c;
  {
    absl::MutexLock lock(&mu_);
    c = std::move(current_);
  }
  if (c != nullptr) c->Close();
  c.reset();
  if (!state_->WaitAllGone(absl::Seconds(10))) {
    LOG(WARNING) << "the data-plane connection to " << peer_ << " did not end within 10 s of its close";
  }
}

void PsTcpChannel::FallBack(const absl::Status& why) {
  // No data plane offered is a setting (TLS, --tcp_data_plane=off); the
  // rest are surprises worth a warning.
  const std::string line = absl::StrCat("data plane to ", peer_, " (", address_, "): ", why.message(),
                                       "; its calls go over the gRPC stream");
  if (why.code() == absl::StatusCode::kNotFound) {
    LOG(INFO) << line;
  } else {
    LOG(WARNING) << line;
  }
  fallback_ = std::make_unique<PsStream>(channel_, peer_);
}

absl::StatusOr<std::shared_ptr<PsTcpChannel::Connection>> PsTcpChannel::Current() {
  {
    absl::MutexLock lock(&mu_);
    if (fallback_ != nullptr) return std::shared_ptr<Connection>();
    if (current_ != nullptr && !current_->broken()) return current_;
  }
  absl::MutexLock connecting(&connect_mu_);
  std::shared_ptr<Connection> old;
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);  // another caller may have connected meanwhile
    if (fallback_ != nullptr) return std::shared_ptr<Connection>();
    if (current_ != nullptr && !current_->broken()) return current_;
    old = std::move(current_);
    id = static_cast<uint64_t>(++opened_);
  }
  if (old != nullptr) old->Close();  // its reader fails the calls still on it
  absl::StatusOr<std::shared_ptr<Connection>> c = Open(id);
  absl::MutexLock lock(&mu_);
  if (c.ok() && *c != nullptr) current_ = *c;
  if (c.ok() && *c == nullptr && fallback_ == nullptr) {
    FallBack(absl::NotFoundError("the PS offers no TCP data plane"));
  }
  return c;
}

absl::StatusOr<std::shared_ptr<PsTcpChannel::Connection>> PsTcpChannel::Open(uint64_t id) {
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  // 1. The data port and a ticket, over the authenticated gRPC channel.
  auto fall_back = [this](const absl::Status& why) -> absl::StatusOr<std::shared_ptr<Connection>> {
    absl::MutexLock lock(&mu_);
    if (fallback_ == nullptr) FallBack(why);
    return std::shared_ptr<Connection>();
  };
  std::unique_ptr<ParameterServer::Stub> stub = ParameterServer::NewStub(channel_);
  absl::StatusOr<OpenDataPlaneResponse> open =
      CallUnary(stub.get(), &ParameterServer::Stub::OpenDataPlane, OpenDataPlaneRequest(),
                options_.connect_timeout, peer_, "OpenDataPlane");
  bool answered_before;
  {
    absl::MutexLock lock(&mu_);
    answered_before = answered_;
  }
  if (open.status().code() == absl::StatusCode::kUnavailable && !answered_before) {
    // One failed connection attempt leaves the channel in TRANSIENT_FAILURE,
    // where a plain call fails at once, even when the PS is serving (CI saw
    // "failed to connect to all addresses ... No such file or directory" on
    // a client's first call to a PS that was answering others): a worker
    // would park and wait for the chief over one lost connection. One more
    // try that waits for gRPC's reconnect (options_.reconnect_wait) rides
    // over that; a dead PS still fails, with the first status. Only until
    // the PS first answers: later, a failure is most likely a PS that died,
    // and a failover must not wait on it.
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + options_.reconnect_wait)));
    OpenDataPlaneResponse again;
    if (stub->OpenDataPlane(&ctx, OpenDataPlaneRequest(), &again).ok()) open = std::move(again);
  }
  if (open.status().code() == absl::StatusCode::kUnimplemented) {
    return fall_back(absl::UnimplementedError("the PS has no OpenDataPlane (an older PS)"));
  }
  if (!open.ok()) return open.status();
  {
    absl::MutexLock lock(&mu_);
    answered_ = true;
  }
  if (open->port() == 0) return std::shared_ptr<Connection>();  // none offered
  if (open->port() < 0 || open->port() > 65535 || open->ticket().size() != tcpframe::kTicketBytes) {
    return fall_back(absl::DataLossError(absl::StrCat("its OpenDataPlane answer names port ", open->port(),
                                                      " and a ticket of ", open->ticket().size(), " bytes")));
  }
  absl::StatusOr<std::pair<std::string, int>> host = net::SplitHostPort(address_);
  if (!host.ok()) return fall_back(host.status());
  // 2. Connect and present the ticket.
  absl::StatusOr<net::Fd> fd = net::ConnectOnce(host->first, open->port(), 0, deadline, nullptr);
  if (!fd.ok()) {
    // The PS answered on its gRPC port but its data port is not reachable
    // from here (a firewall): the stream still works.
    return fall_back(absl::UnavailableError(
        absl::StrCat("data port ", open->port(), " not reachable: ", fd.status().message())));
  }
  const std::string what = absl::StrCat(peer_, "'s data port ", host->first, ":", open->port());
  const std::string hello = tcpframe::EncodeHello(open->ticket());
  absl::Status io = net::IoExact(fd->get(), const_cast<char*>(hello.data()), hello.size(), true, deadline,
                                 nullptr, what);
  uint8_t verdict[tcpframe::kVerdictHeaderBytes];
  if (io.ok()) io = net::IoExact(fd->get(), verdict, sizeof(verdict), false, deadline, nullptr, what);
  if (!io.ok()) return absl::UnavailableError(absl::StrCat("opening the data plane: ", io.message()));
  grpc::StatusCode code;
  uint32_t message_bytes = 0;
  absl::Status v = tcpframe::DecodeVerdictHeader(verdict, &code, &message_bytes);
  if (!v.ok()) return fall_back(v);
  std::string message(message_bytes, '\0');
  if (message_bytes > 0) {
    io = net::IoExact(fd->get(), message.data(), message_bytes, false, deadline, nullptr, what);
    if (!io.ok()) return absl::UnavailableError(absl::StrCat("opening the data plane: ", io.message()));
  }
  if (code != grpc::StatusCode::OK) {
    // Refused (a full PS, a ticket that expired on the way): this call
    // fails; the next one asks for a new ticket.
    return FromGrpcStatus(grpc::Status(code, message), what, "hello");
  }
  // The reader blocks; the writer sends with MSG_DONTWAIT.
  const int flags = ::fcntl(fd->get(), F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd->get(), F_SETFL, flags & ~O_NONBLOCK) < 0) {
    return absl::InternalError(absl::StrCat("fcntl: ", net::ErrnoText(errno)));
  }
  auto c = std::make_shared<Connection>(state_, id, *std::move(fd), peer_, pool_, options_.max_response_bytes);
  c->StartReader(c);
  return c;
}

bool PsTcpChannel::CanRoute() {
  absl::StatusOr<std::shared_ptr<Connection>> c = Current();
  return c.ok() && *c != nullptr;
}

uint64_t PsTcpChannel::Start(psframe::Method method, const grpc::ByteBuffer& request, absl::Duration timeout,
                             const CallRoute& route, Done done) {
  tcpframe::Header h;
  h.method = method;
  h.store = route.present() ? route.store : -1;
  h.epoch = route.present() ? route.epoch : 0;
  h.replica = route.present() && route.replica;
  h.timeout_ms = psframe::TimeoutMs(timeout);
  // Two tries: a connection found broken when the frame is queued never
  // sent it, so it goes on a fresh one.
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::shared_ptr<Connection>> c = Current();
    if (!c.ok()) {
      const uint64_t id = state_->NewId();
      done(c.status());
      return id;
    }
    if (*c == nullptr) {
      PsStream* stream;
      {
        absl::MutexLock lock(&mu_);
        stream = fallback_.get();
      }
      return stream->Start(method, request, timeout, route, std::move(done)) | kFallbackBit;
    }
    const uint64_t id = state_->Add(std::move(done), (*c)->id(), method);
    h.call_id = id;
    if ((*c)->Send(tcpframe::Encode(h, std::string(), request))) return id;
    // Not sent: ours to end or resend, unless the connection's end took it
    // first (between Add and Send) and ended it already.
    PendingCalls::Call mine = state_->Take(id);
    if (mine.done == nullptr) return id;
    done = std::move(mine.done);
    if (attempt == 1) {
      done(absl::UnavailableError(absl::StrCat("no connection to ", peer_)));
      return id;
    }
  }
}

void PsTcpChannel::Expire(uint64_t id, const absl::Status& status) {
  if (id & kFallbackBit) {
    PsStream* stream;
    {
      absl::MutexLock lock(&mu_);
      stream = fallback_.get();
    }
    if (stream != nullptr) stream->Expire(id & ~kFallbackBit, status);
    return;
  }
  PendingCalls::Call p = state_->Take(id);
  if (p.done) p.done(status);
}

}  // namespace psrt
