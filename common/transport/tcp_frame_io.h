// Reading and writing tcp_frame.h frames on one connected TCP socket, for
// both ends of the PS data plane.
//
// FrameReader reads ahead in 64 KiB reads, so a burst of small frames (16
// pushes in flight) costs one read() rather than one per frame; a large
// frame gets a buffer of its own (from a BufferPool, 64-byte aligned) and
// the rest of it is read straight into that, so its tensors are adopted
// where they land (no copy after the kernel's). A large body is charged to
// the reader's ByteBudget as it arrives, a step (1 MiB) ahead of its bytes,
// not whole when announced: a peer that announces 1 GiB and stalls holds
// one step, not the budget. Once a frame has begun it must keep coming
// (FrameDeadlines); between frames a connection may idle for ever.
//
// FrameWriter sends from the caller's thread while the socket takes the
// bytes (never blocking it), and hands what the socket will not take now to
// its own thread, which waits for the socket and sends on. Frames queued
// while one is being sent go out together in one sendmsg. Cork/Uncork let a
// thread that is about to queue several frames (answers to the requests of
// one read) send them in one call.
//
// FrameReader: one reading thread. FrameWriter: thread-safe.
#ifndef PSRT_COMMON_TRANSPORT_TCP_FRAME_IO_H_
#define PSRT_COMMON_TRANSPORT_TCP_FRAME_IO_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_pool.h"
#include "common/transport/tcp_frame.h"

namespace psrt {
namespace tcpframe {

// Bytes of large frame bodies held at once, shared by the readers of one
// server: a body that would take it past its limit is refused (skipped)
// rather than allocated, so peers cannot make a PS allocate without bound
// (a connection serves one frame at a time, but there may be many).
class ByteBudget {
 public:
  explicit ByteBudget(uint64_t limit) : limit_(limit) {}
  uint64_t limit() const { return limit_; }
  bool TryAcquire(uint64_t n) {
    uint64_t held = held_.load();
    do {
      if (n > limit_ || held > limit_ - n) return false;
    } while (!held_.compare_exchange_weak(held, held + n));
    return true;
  }
  void Release(uint64_t n) { held_.fetch_sub(n); }
  uint64_t held() const { return held_.load(); }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> held_{0};
};

// How long a frame that has begun (a byte of it has arrived) may take to
// come whole, so that a peer cannot hold a reader, and the budget its body
// is charged, by sending slowly or not at all. absl::InfiniteDuration()
// turns a deadline off.
struct FrameDeadlines {
  // A begun frame that sends nothing for this long ends its connection.
  absl::Duration idle = absl::Seconds(30);
  // A begun frame this old that has come slower than min_bytes_per_second
  // since it began (a byte now and then, never idle) ends it too.
  absl::Duration slow_grace = absl::Seconds(60);
  uint64_t min_bytes_per_second = 64 << 10;
};

class FrameReader {
 public:
  // Large bodies are charged to the budget this much at a time.
  static constexpr uint64_t kBudgetStepBytes = 1 << 20;

  // `fd` (not owned) is a connected socket, blocking for reads. Bodies over
  // `max_body_bytes`, or that outgrow what `budget` (optional) has left, are
  // refused and skipped (see Next). `what` names the peer in errors.
  FrameReader(int fd, std::shared_ptr<BufferPool> pool, uint64_t max_body_bytes, std::string what,
              std::shared_ptr<ByteBudget> budget = nullptr, FrameDeadlines deadlines = {});

  // The next frame's body. Blocks until it is whole; between frames without
  // a deadline. UNAVAILABLE when the connection ends or fails (also
  // mid-frame); DEADLINE_EXCEEDED when a begun frame missed its deadlines
  // (the caller ends the connection: its stream cannot be trusted to go
  // on); RESOURCE_EXHAUSTED for a body over the limit, or one that outgrew
  // the budget on the way (the rest of its bytes are read and dropped,
  // under the same deadlines, and what it was charged given back): then
  // `*oversized` holds its header, when the body had one, so the caller can
  // answer it, and the next Next reads the frame after it. A body handed
  // out gives its charge back when its last user lets it go.
  absl::Status Next(std::shared_ptr<TensorBuffer>* body, absl::StatusOr<Header>* oversized, bool response);

  // Whether bytes are buffered: a caller that corks its answers uncorks
  // once this is false (before Next would block).
  bool buffered() const { return end_ > begin_; }

 private:
  // Reads at least one and at most `n` bytes into `dst`: without a
  // deadline between frames, under the frame's deadlines once it has begun
  // (in_frame_, or bytes of it are buffered). UNAVAILABLE on EOF.
  absl::Status ReadSome(uint8_t* dst, size_t n, size_t* got);
  // Waits for the socket to be readable within the begun frame's deadlines.
  absl::Status AwaitBytes();
  // Reads more into the chunk (at least one byte).
  absl::Status Fill();
  absl::Status ReadExact(uint8_t* dst, size_t n);
  absl::Status Skip(uint64_t n);
  // The one way a body of `n` bytes is refused: `consumed` of them have
  // been read (`head` holds the first of them, up to a header's worth); its
  // header is completed from the stream for *oversized, the rest dropped.
  // Returns `why`, or how the connection failed meanwhile.
  absl::Status Refuse(uint64_t n, uint64_t consumed, const uint8_t* head, bool response, absl::Status why,
                      absl::StatusOr<Header>* oversized);
  absl::Status OverBudget(uint64_t n, uint64_t got) const;

  const int fd_;
  const std::shared_ptr<BufferPool> pool_;
  const uint64_t max_body_bytes_;
  const std::string what_;
  const std::shared_ptr<ByteBudget> budget_;
  const FrameDeadlines deadlines_;
  std::shared_ptr<TensorBuffer> chunk_;  // read-ahead buffer; small bodies reference it
  size_t begin_ = 0;                     // unread bytes are [begin_, end_)
  size_t end_ = 0;
  uint64_t read_total_ = 0;    // bytes read from the socket, ever
  bool in_frame_ = false;      // the current frame's prefix has been consumed
  uint64_t frame_base_ = 0;    // read_total_ where the current frame starts
  // When the current frame first had to wait for bytes (its clock starts
  // only then: no clock reads for frames that arrive whole).
  absl::Time frame_waited_ = absl::InfiniteFuture();
};

class FrameWriter {
 public:
  static constexpr int64_t kMinSendBytesPerSecond = 1 << 20;
  // `fd` (not owned) stays open until Close has returned. `send_timeout`:
  // how long the writer's thread waits for a socket that takes nothing
  // before it gives up on the connection (a peer that stopped reading); and
  // each frame must be taken whole within `send_timeout` and a second per
  // kMinSendBytesPerSecond of it from when it is next to go (a peer that
  // reads a few bytes now and then is given up too).
  // `max_queued_frames` (0: no bound): a peer that leaves more frames than
  // this unsent is given up at once (the socket is shut down, so a reader
  // blocked on it wakes), not after send_timeout: answers that are only
  // refusals (small, and not counted against any budget) piled up by the
  // hundred thousand behind one that never read.
  FrameWriter(int fd, std::string what, absl::Duration send_timeout = absl::Seconds(60),
              size_t max_queued_frames = 0);
  ~FrameWriter();  // Close()
  FrameWriter(const FrameWriter&) = delete;
  FrameWriter& operator=(const FrameWriter&) = delete;

  // Queues `frame` and sends what it can without blocking (or, with
  // `may_wait`, waits for the socket on this thread rather than handing the
  // rest to the writer's: for a thread that has nothing else to do, such as
  // a server's reader answering its own connection). False (the frame
  // dropped) once the connection is broken or closed.
  bool Send(std::unique_ptr<OutFrame> frame, bool may_wait = false);
  // While corked (counted), Send only queues; the last Uncork sends.
  void Cork();
  void Uncork();
  // Why the connection broke, or OK.
  absl::Status broken() const;
  // Whether it was given up for max_queued_frames.
  bool overflowed() const;
  // Drops what is queued, stops the thread, and shuts the socket down for
  // writing and reading (a reader blocked on it wakes). Idempotent.
  void Close();

 private:
  // Sends from the queue until it is empty, the socket is full (`wait`:
  // poll for it, on the writer's thread; else hand over to that thread), or
  // the connection breaks. REQUIRES: this thread holds the sending turn.
  void Drain(bool wait);
  void Loop();
  void BreakLocked(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When a frame of `bytes` that is next to go from now must be sent.
  absl::Time FrameDeadline(size_t bytes) const;

  const int fd_;
  const std::string what_;
  const absl::Duration send_timeout_;
  const size_t max_queued_frames_;
  mutable absl::Mutex mu_;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  // Frames keep their address in the deque while others are added.
  std::deque<std::unique_ptr<OutFrame>> queue_ ABSL_GUARDED_BY(mu_);
  size_t sent_of_front_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of queue_.front() already sent
  absl::Time front_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();  // queue_.front()'s, whole
  bool sending_ ABSL_GUARDED_BY(mu_) = false;      // a thread holds the sending turn
  bool handed_over_ ABSL_GUARDED_BY(mu_) = false;  // ...and it is the writer's thread
  int corked_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tcpframe
}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_TCP_FRAME_IO_H_
