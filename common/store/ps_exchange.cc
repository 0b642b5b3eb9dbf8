#include "common/store/ps_exchange.h"

#include <atomic>
#include <deque>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/rpc/status_util.h"
#include "common/store/ps_service.h"
#include "common/transport/ps_frame.h"
#include "glog/logging.h"
#include "grpcpp/alarm.h"

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

std::atomic<int64_t> live_streams{0};  // LiveExchangeStreams

// Owned by itself (self_) until OnDone, and by its write deadline's alarm
// while that is set, so that a late alarm never touches a deleted reactor.
class ExchangeReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  static ExchangeReactor* Create(PsServiceImpl* service, grpc::CallbackServerContext* ctx,
                                 absl::Duration write_timeout) {
    live_streams.fetch_add(1);
    auto* r = new ExchangeReactor(service, ctx, write_timeout);
    r->self_.reset(r);
    r->StartRead(&r->in_);
    return r;
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
      if (!read) {
        read_paused_ = true;  // OnWriteDone reads on
        if (!alarm_set_) SetWriteDeadlineLocked(self_);
      }
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
      ++written_;
      if (!ok) {
        broken_ = true;  // the client is gone: later answers are dropped
        out_.clear();
      }
    });
  }

  // Reading stops at kMaxUnwrittenAnswers answers unwritten (frames being
  // served, a parked pull among them, do not count) and resumes at half.
  bool ReadFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return out_.size() >= kMaxUnwrittenAnswers; }

  void OnDone() override {
    live_streams.fetch_sub(1);
    std::shared_ptr<ExchangeReactor> last = std::move(self_);  // deletes this unless the alarm holds it
    grpc::Alarm* alarm = nullptr;
    {
      absl::MutexLock lock(&mu_);  // finished: the alarm is set anew no more
      if (alarm_set_) alarm = alarm_.get();
    }
    if (alarm != nullptr) alarm->Cancel();  // its callback soon lets go of this
  }

 private:
  // What to start once the lock is released.
  struct Next {
    bool read = false;
    grpc::ByteBuffer* write = nullptr;
    bool finish = false;
    grpc::Status status;
  };

  ExchangeReactor(PsServiceImpl* service, grpc::CallbackServerContext* ctx, absl::Duration write_timeout)
      : service_(service), ctx_(ctx), write_timeout_(write_timeout) {}

  // While reads are paused: once write_timeout_ passes with no answer
  // written, the stream is cancelled (a caller that reads nothing would
  // otherwise hold it, its frames and their slots for good).
  void SetWriteDeadlineLocked(std::shared_ptr<ExchangeReactor> keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (write_timeout_ <= absl::ZeroDuration() || keep == nullptr) return;
    alarm_set_ = true;
    written_at_alarm_ = written_;
    alarm_ = std::make_unique<grpc::Alarm>();
    alarm_->Set(absl::ToChronoTime(absl::Now() + write_timeout_), [keep = std::move(keep)](bool ok) mutable {
      std::shared_ptr<ExchangeReactor> r = std::move(keep);  // the alarm holds the reactor no more
      r->OnWriteDeadline(r, ok);
    });
  }

  void OnWriteDeadline(const std::shared_ptr<ExchangeReactor>& keep, bool ok) {
    size_t unwritten = 0;
    {
      absl::MutexLock lock(&mu_);
      alarm_set_ = false;
      if (!ok || finished_ || broken_ || !read_paused_) return;                // a later pause sets it anew
      if (written_ != written_at_alarm_) return SetWriteDeadlineLocked(keep);  // progress: watch on
      unwritten = out_.size();
      broken_ = true;      // answers from now on are dropped
      cancelling_ = true;  // no Finish (which frees ctx_) until TryCancel is done
      final_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("no answer written for ", absl::FormatDuration(write_timeout_), " with ",
                                         unwritten, " waiting: the caller reads none (--exchange_write_timeout_s)"));
    }
    LOG(WARNING) << "Exchange stream from " << ctx_->peer() << ": no answer written for "
                 << absl::FormatDuration(write_timeout_) << " with " << unwritten
                 << " waiting (the caller reads none): ended (--exchange_write_timeout_s)";
    // The caller sees CANCELLED: the status could only follow the answers it does not read.
    ctx_->TryCancel();
    Update([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { cancelling_ = false; });
  }

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
    } else if (!reading_ && serving_ == 0 && !writing_ && out_.empty() && !cancelling_) {
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
  const absl::Duration write_timeout_;
  std::shared_ptr<ExchangeReactor> self_;  // set by Create, released by OnDone
  grpc::ByteBuffer in_;
  absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = true;       // a read is or will be pending (false once they end)
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;  // no read pending: too many answers unwritten
  int serving_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;
  // The write deadline: answers written in all, and when it was set.
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_at_alarm_ ABSL_GUARDED_BY(mu_) = 0;
  bool alarm_set_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  // An answer to write, and what it holds until written.
  struct Out {
    grpc::ByteBuffer frame;
    std::shared_ptr<void> hold;
  };
  std::deque<Out> out_ ABSL_GUARDED_BY(mu_);
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int64_t LiveExchangeStreams() { return live_streams.load(); }

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewExchangeReactor(PsServiceImpl* service,
                                                                                grpc::CallbackServerContext* ctx,
                                                                                absl::Duration write_timeout) {
  return ExchangeReactor::Create(service, ctx, write_timeout);
}

}  // namespace psrt
