#include "common/store/ps_exchange.h"

#include <deque>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/rpc/status_util.h"
#include "common/store/ps_service.h"
#include "common/transport/ps_frame.h"

namespace psrt {
namespace {

// The longest a frame's call may wait (a parked pull), whatever it asks.
constexpr absl::Duration kMaxWait = absl::Seconds(60);
// Answers made and not yet written to the caller, at most, before the
// stream stops reading frames: a caller that never reads its answers
// stalls its own writes (HTTP/2 flow control) instead of making the PS
// queue an answer (if only a refusal) for every frame it sends. Reading
// goes on once the queue is down to half.
constexpr size_t kMaxUnwrittenAnswers = 64;

class ExchangeReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ExchangeReactor(PsServiceImpl* service, grpc::CallbackServerContext* ctx) : service_(service), ctx_(ctx) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side, or the stream broke
      return Update([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { reading_ = false; });
    }
    grpc::ByteBuffer frame;
    frame.Swap(&in_);
    grpc::ByteBuffer payload;
    absl::StatusOr<psframe::RequestHeader> h = psframe::DecodeRequest(frame, &payload);
    if (!h.ok()) {
      return Update([this, &h]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        reading_ = false;
        if (final_.ok()) final_ = ToGrpcStatus(h.status());
      });
    }
    bool read;
    {
      absl::MutexLock lock(&mu_);
      ++serving_;
      read = !read_paused_ && !ReadFullLocked();
      if (!read) read_paused_ = true;  // OnWriteDone reads on
    }
    if (read) StartRead(&in_);  // the next frame may be served while this one is
    const absl::Duration wait = std::min(absl::Milliseconds(h->timeout_ms), kMaxWait);
    const uint64_t id = h->call_id;
    service_->ServeData(*ctx_, h->method, payload, absl::Now() + wait,
                        [this, id](grpc::Status s, grpc::ByteBuffer resp, std::shared_ptr<void> hold) {
                          Answer(id, s, resp, std::move(hold));
                        });
  }

  void OnWriteDone(bool ok) override {
    Update([this, ok]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      out_.pop_front();
      writing_ = false;
      if (!ok) {
        broken_ = true;  // the client is gone: later answers are dropped
        out_.clear();
      }
    });
  }

  // Reading stops at kMaxUnwrittenAnswers answers unwritten (frames being
  // served, a parked pull among them, do not count) and resumes at half.
  bool ReadFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return out_.size() >= kMaxUnwrittenAnswers; }

  void OnDone() override { delete this; }

 private:
  // What to start once the lock is released.
  struct Next {
    bool read = false;
    grpc::ByteBuffer* write = nullptr;
    bool finish = false;
    grpc::Status status;
  };

  // `hold` (the call's slots) stays with the frame until it is written.
  void Answer(uint64_t id, const grpc::Status& s, const grpc::ByteBuffer& resp, std::shared_ptr<void> hold) {
    Out out{psframe::EncodeResponse(id, s, resp), std::move(hold)};
    Update([this, &out]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      --serving_;
      if (!broken_) out_.push_back(std::move(out));
    });
  }

  // Changes the state under the lock, then starts what it calls for with the
  // lock released (gRPC may run a reaction inline from Start*/Finish, and
  // Finish may delete this).
  template <typename Change>
  void Update(Change change) {
    Next next;
    {
      absl::MutexLock lock(&mu_);
      change();
      next = NextLocked();
    }
    Run(next);
  }

  // The next write, or the end once nothing can touch the stream again: no
  // more reads, no frame being served, nothing left to write.
  Next NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Next n;
    if (finished_) return n;
    if (read_paused_ && (broken_ || out_.size() <= kMaxUnwrittenAnswers / 2)) {
      read_paused_ = false;  // a broken stream reads on to see its end
      n.read = true;
    }
    if (!writing_ && !out_.empty()) {
      writing_ = true;
      n.write = &out_.front().frame;  // deque elements keep their address while others are added
    } else if (!reading_ && serving_ == 0 && !writing_ && out_.empty()) {
      finished_ = true;
      n.finish = true;
      n.status = final_;
    }
    return n;
  }

  void Run(const Next& n) {
    if (n.read) StartRead(&in_);
    if (n.write != nullptr) StartWrite(n.write);
    if (n.finish) Finish(n.status);  // may delete this (OnDone): nothing after it
  }

  PsServiceImpl* const service_;
  grpc::CallbackServerContext* const ctx_;
  grpc::ByteBuffer in_;
  absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = true;       // a read is or will be pending (false once they end)
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;  // no read pending: too many answers unwritten
  int serving_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // An answer to write, and what it holds until written.
  struct Out {
    grpc::ByteBuffer frame;
    std::shared_ptr<void> hold;
  };
  std::deque<Out> out_ ABSL_GUARDED_BY(mu_);
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewExchangeReactor(PsServiceImpl* service,
                                                                                grpc::CallbackServerContext* ctx) {
  return new ExchangeReactor(service, ctx);
}

}  // namespace psrt
