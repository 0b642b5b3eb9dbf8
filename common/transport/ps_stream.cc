#include "common/transport/ps_stream.h"

#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/status_util.h"
#include "glog/logging.h"
#include "grpcpp/generic/generic_stub.h"

namespace psrt {

class PsStream::Connection : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  Connection(std::shared_ptr<PendingCalls> state, uint64_t id, std::string peer)
      : state_(std::move(state)), id_(id), peer_(std::move(peer)) {}

  // Opens the stream; `self` keeps this alive until OnDone. A hold keeps
  // OnDone (after which gRPC allows no call on the stream, not even a
  // cancel) away until Close, and until no caller is between deciding to
  // write and StartWrite.
  void Open(grpc::GenericStub* stub, std::shared_ptr<Connection> self) {
    self_ = std::move(self);
    state_->Opened();
    stub->PrepareBidiStreamingCall(&ctx_, psframe::kExchangeMethod, grpc::StubOptions(), this);
    AddHold();
    StartRead(&in_);
    StartCall();
  }

  uint64_t id() const { return id_; }

  // Queues a frame; false when the stream is already broken (the frame was
  // not sent, so the caller may send it on a new stream).
  bool Send(grpc::ByteBuffer frame) {
    grpc::ByteBuffer* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return false;
      out_.push_back(std::move(frame));
      write = NextWriteLocked();
    }
    Write(write);
    return true;
  }

  bool broken() const {
    absl::MutexLock lock(&mu_);
    return broken_;
  }

  // Ends the stream for good (PsStream drops it): calls still on it fail.
  void Close() {
    bool release;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      closing_ = true;
      if (why_.empty()) why_ = "the client closed it";
      release = ReleaseDueLocked();
    }
    ctx_.TryCancel();  // the hold is still ours here, so the call is alive
    if (release) RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    grpc::ByteBuffer* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      out_.pop_front();
      writing_ = false;
      if (ok) write = NextWriteLocked();
    }
    if (!ok) return Break("a write failed");
    Write(write);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The stream ended (PS gone, connection lost, or closed): its calls
      // fail now; OnDone waits for Close.
      Break("the PS went away or the connection broke");
      FailAll();
      return;
    }
    grpc::ByteBuffer frame;
    frame.Swap(&in_);
    StartRead(&in_);
    uint64_t call = 0;
    grpc::Status status;
    grpc::ByteBuffer payload;
    absl::Status bad = psframe::DecodeResponse(frame, &call, &status, &payload);
    if (!bad.ok()) {  // a PS speaking another format: end the stream (its read fails next)
      Break(std::string(bad.message()));
      ctx_.TryCancel();
      return;
    }
    PendingCalls::Call p = state_->Take(call);
    if (p.done == nullptr) return;  // the caller gave up on it already
    if (status.ok()) {
      p.done(std::move(payload));
    } else {
      p.done(FromGrpcStatus(status, peer_, psframe::MethodName(p.method)));
    }
  }

  void OnDone(const grpc::Status&) override {
    FailAll();
    std::shared_ptr<PendingCalls> state = state_;
    self_.reset();  // may delete this: nothing after it but the local
    state->Gone();
  }

 private:
  // The frame to write next, if no write is under way; counts the caller as
  // starting one (Write ends that).
  grpc::ByteBuffer* NextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || out_.empty() || broken_) return nullptr;
    writing_ = true;
    ++starting_;
    return &out_.front();  // deque elements keep their address while others are added
  }

  // Outside the lock: gRPC may run a reaction inline from StartWrite.
  void Write(grpc::ByteBuffer* frame) {
    if (frame == nullptr) return;
    StartWrite(frame);
    bool release;
    {
      absl::MutexLock lock(&mu_);
      --starting_;
      release = ReleaseDueLocked();
    }
    if (release) RemoveHold();
  }

  void Break(const std::string& why) {
    bool release;
    {
      absl::MutexLock lock(&mu_);
      broken_ = true;
      if (why_.empty()) why_ = why;
      release = ReleaseDueLocked();
    }
    if (release) RemoveHold();
  }

  void FailAll() {
    std::string why;
    {
      absl::MutexLock lock(&mu_);
      why = why_;
    }
    const absl::Status failed = absl::UnavailableError(
        absl::StrCat("stream to ", peer_, " ended (", why, "); the call may or may not have been applied"));
    for (Done& d : state_->TakeAll(id_)) d(failed);
  }

  bool ReleaseDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!closing_ || starting_ > 0 || released_) return false;
    released_ = true;
    return true;
  }

  const std::shared_ptr<PendingCalls> state_;
  const uint64_t id_;
  const std::string peer_;
  grpc::ClientContext ctx_;
  grpc::ByteBuffer in_;
  mutable absl::Mutex mu_;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int starting_ ABSL_GUARDED_BY(mu_) = 0;    // callers between NextWriteLocked and StartWrite
  bool closing_ ABSL_GUARDED_BY(mu_) = false;   // Close was called
  bool released_ ABSL_GUARDED_BY(mu_) = false;  // the hold of Open
  std::string why_ ABSL_GUARDED_BY(mu_);
  std::deque<grpc::ByteBuffer> out_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Connection> self_;
};

PsStream::PsStream(std::shared_ptr<grpc::ChannelInterface> channel, std::string peer)
    : stub_(std::make_unique<grpc::GenericStub>(std::move(channel))),
      peer_(std::move(peer)),
      state_(std::make_shared<PendingCalls>()) {}

PsStream::~PsStream() {
  std::shared_ptr<Connection> c;
  {
    absl::MutexLock lock(&mu_);
    c = std::move(current_);
  }
  if (c != nullptr) c->Close();
  c.reset();
  if (!state_->WaitAllGone(absl::Seconds(10))) {
    LOG(WARNING) << "the stream to " << peer_ << " did not end within 10 s of its cancel";
  }
}

std::shared_ptr<PsStream::Connection> PsStream::Current() {
  absl::MutexLock lock(&mu_);
  if (current_ == nullptr || current_->broken()) {
    if (current_ != nullptr) current_->Close();
    current_ = std::make_shared<Connection>(state_, static_cast<uint64_t>(++opened_), peer_);
    current_->Open(stub_.get(), current_);
  }
  return current_;
}

uint64_t PsStream::Start(psframe::Method method, const grpc::ByteBuffer& request, absl::Duration timeout,
                         const CallRoute& route, Done done) {
  if (route.present()) {
    const uint64_t id = state_->NewId();
    done(absl::UnavailableError(absl::StrCat("the stream to ", peer_, " carries no store and epoch")));
    return id;
  }
  psframe::RequestHeader h;
  h.method = method;
  h.timeout_ms = psframe::TimeoutMs(timeout);
  // Two tries: a stream found broken when the frame is queued never sent
  // it, so it goes on a fresh stream.
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<Connection> c = Current();
    const uint64_t id = state_->Add(std::move(done), c->id(), method);
    h.call_id = id;
    if (c->Send(psframe::EncodeRequest(h, request))) return id;
    // Not sent: ours to end or resend, unless the broken stream's FailAll
    // took it first (between Add and Send) and has ended it already. Sent
    // again then, `done` would run twice (a caller counting its answers
    // returns early and a late answer writes into what it freed).
    PendingCalls::Call mine = state_->Take(id);
    if (mine.done == nullptr) return id;
    done = std::move(mine.done);
    if (attempt == 1) {
      done(absl::UnavailableError(absl::StrCat("no stream to ", peer_)));
      return id;
    }
  }
}

void PsStream::Expire(uint64_t id, const absl::Status& status) {
  PendingCalls::Call p = state_->Take(id);
  if (p.done) p.done(status);
}

}  // namespace psrt
