#include "common/transport/tcp_frame_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/net/socket.h"

namespace psrt {
namespace tcpframe {
namespace {

constexpr size_t kReadBytes = 64 << 10;     // one read() asks for this much
constexpr size_t kChunkBytes = 256 << 10;   // read-ahead buffer
constexpr size_t kOwnBufferBytes = 64 << 10;  // bodies over this get their own buffer
constexpr int kMaxIov = 1024;                 // IOV_MAX on Linux

}  // namespace

// ------------------------------------------------------------ FrameReader

FrameReader::FrameReader(int fd, std::shared_ptr<BufferPool> pool, uint64_t max_body_bytes, std::string what,
                         std::shared_ptr<ByteBudget> budget, FrameDeadlines deadlines)
    : fd_(fd),
      pool_(std::move(pool)),
      max_body_bytes_(max_body_bytes),
      what_(std::move(what)),
      budget_(std::move(budget)),
      deadlines_(deadlines) {}

absl::Status FrameReader::AwaitBytes() {
  const absl::Time now = absl::Now();
  if (frame_waited_ == absl::InfiniteFuture()) frame_waited_ = now;
  // Given up once it is older than the grace and has come slower than the
  // rate: when its bytes so far would no longer be enough.
  const uint64_t got = read_total_ - frame_base_;
  const double rate = static_cast<double>(std::max<uint64_t>(deadlines_.min_bytes_per_second, 1));
  const absl::Time slow_at =
      frame_waited_ + std::max(deadlines_.slow_grace, absl::Seconds(static_cast<double>(got) / rate));
  const absl::Time idle_at = now + deadlines_.idle;
  const absl::Time until = std::min(slow_at, idle_at);
  for (absl::Time t = now;; t = absl::Now()) {
    const absl::Duration left = until - t;
    if (left <= absl::ZeroDuration()) break;
    pollfd p{fd_, POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left), 1 << 30) + 1);
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return absl::OkStatus();  // bytes, the end, or an error: the read says which
    if (r < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll for ", what_, ": ", net::ErrnoText(errno)));
    }
  }
  if (idle_at < slow_at) {
    return absl::DeadlineExceededError(absl::StrCat(what_, " sent nothing for ", absl::FormatDuration(deadlines_.idle),
                                                    " in the middle of a frame (", got,
                                                    " bytes of it came): connection given up"));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      what_, " sent a frame slower than ", deadlines_.min_bytes_per_second >> 10, " KiB/s (", got, " bytes in ",
      absl::FormatDuration(absl::Now() - frame_waited_), "; grace ", absl::FormatDuration(deadlines_.slow_grace),
      "): connection given up"));
}

absl::Status FrameReader::ReadSome(uint8_t* dst, size_t n, size_t* got) {
  const bool begun = in_frame_ || end_ > begin_;
  while (true) {
    // Between frames a blocking read (no deadline, as cheap as it gets);
    // within one, never block past the frame's deadlines.
    const ssize_t r = begun ? ::recv(fd_, dst, n, MSG_DONTWAIT) : ::read(fd_, dst, n);
    if (r > 0) {
      read_total_ += static_cast<uint64_t>(r);
      *got = static_cast<size_t>(r);
      return absl::OkStatus();
    }
    if (r == 0) {
      return absl::UnavailableError(
          absl::StrCat(what_, begun ? " closed the connection in the middle of a frame" : " closed the connection"));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("read from ", what_, ": ", net::ErrnoText(errno)));
    }
    if (begun) {
      absl::Status s = AwaitBytes();
      if (!s.ok()) return s;
    } else {  // a non-blocking socket between frames: wait for bytes
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, -1);
    }
  }
}

absl::Status FrameReader::Fill() {
  const size_t room = chunk_->size() - end_;
  size_t got = 0;
  absl::Status s = ReadSome(static_cast<uint8_t*>(chunk_->data()) + end_, std::min(room, kReadBytes), &got);
  if (s.ok()) end_ += got;
  return s;
}

absl::Status FrameReader::ReadExact(uint8_t* dst, size_t n) {
  // Room for n contiguous bytes after begin_: else a fresh chunk takes the
  // unread bytes (the old one lives while bodies reference it).
  if (chunk_ == nullptr || chunk_->size() - begin_ < n) {
    std::shared_ptr<TensorBuffer> fresh = pool_->Allocate(std::max(kChunkBytes, n));
    if (end_ > begin_) std::memcpy(fresh->data(), static_cast<uint8_t*>(chunk_->data()) + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    chunk_ = std::move(fresh);
  }
  while (end_ - begin_ < n) {
    absl::Status s = Fill();
    if (!s.ok()) return s;
  }
  if (dst != nullptr) std::memcpy(dst, static_cast<uint8_t*>(chunk_->data()) + begin_, n);
  begin_ += n;
  return absl::OkStatus();
}

absl::Status FrameReader::Skip(uint64_t n) {
  while (n > 0) {
    if (end_ == begin_) {
      begin_ = end_ = 0;
      absl::Status s = Fill();
      if (!s.ok()) return s;
    }
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, end_ - begin_));
    begin_ += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::Status FrameReader::Refuse(uint64_t n, uint64_t consumed, const uint8_t* head, bool response, absl::Status why,
                                 absl::StatusOr<Header>* oversized) {
  absl::Status s;
  if (n < kHeaderBytes) {
    *oversized = absl::InvalidArgumentError("shorter than a header");
    return (s = Skip(n - consumed)).ok() ? why : s;
  }
  uint8_t h[kHeaderBytes];
  const size_t have = static_cast<size_t>(std::min<uint64_t>(consumed, kHeaderBytes));
  if (have > 0) std::memcpy(h, head, have);
  if (!(s = ReadExact(h + have, kHeaderBytes - have)).ok()) return s;
  *oversized = DecodeHeader(h, kHeaderBytes, response);
  return (s = Skip(n - std::max<uint64_t>(consumed, kHeaderBytes))).ok() ? why : s;
}

absl::Status FrameReader::OverBudget(uint64_t n, uint64_t got) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "a frame of ", n, " bytes from ", what_, " refused", got > 0 ? absl::StrCat(" after ", got, " bytes") : "",
      ": requests of ", budget_->held(), " bytes are held already, the budget is ", budget_->limit(),
      " (--max_data_plane_mb); retry later"));
}

absl::Status FrameReader::Next(std::shared_ptr<TensorBuffer>* body, absl::StatusOr<Header>* oversized,
                               bool response) {
  in_frame_ = false;
  frame_base_ = read_total_ - (end_ - begin_);
  frame_waited_ = absl::InfiniteFuture();
  uint8_t prefix[kPrefixBytes];
  absl::Status s = ReadExact(prefix, kPrefixBytes);
  if (!s.ok()) return s;
  in_frame_ = true;
  const uint64_t n = DecodePrefix(prefix);
  if (n > max_body_bytes_) {
    return Refuse(n, 0, nullptr, response,
                  absl::ResourceExhaustedError(
                      absl::StrCat("a frame of ", n, " bytes from ", what_, " is over the limit of ", max_body_bytes_)),
                  oversized);
  }
  if (n <= kOwnBufferBytes) {
    // In the read-ahead chunk, referenced (it stays alive with the body).
    if (!(s = ReadExact(nullptr, static_cast<size_t>(n))).ok()) return s;
    uint8_t* p = static_cast<uint8_t*>(chunk_->data()) + begin_ - n;
    *body = std::make_shared<TensorBuffer>(p, static_cast<size_t>(n), [chunk = chunk_](void*) {});
    return absl::OkStatus();
  }
  // Its own aligned buffer: what is read ahead, then the rest straight in.
  // With a budget, charged a step ahead of what has arrived (a body that
  // could never fit is refused at once); the buffer gives the charge back
  // when its last user goes, and a body that is not finished gives it back
  // here.
  uint64_t charged = n;
  if (budget_ != nullptr) {
    charged = std::min<uint64_t>(n, std::max<uint64_t>(kBudgetStepBytes, end_ - begin_));
    if (n > budget_->limit() || !budget_->TryAcquire(charged)) {
      return Refuse(n, 0, nullptr, response, OverBudget(n, 0), oversized);
    }
  }
  auto give_back = [this](uint64_t bytes) {
    if (budget_ != nullptr) budget_->Release(bytes);
  };
  // The buffer is as large as announced, but only what arrives is touched.
  std::shared_ptr<TensorBuffer> own = pool_->TryAllocate(static_cast<size_t>(n));
  if (own == nullptr) {
    give_back(charged);
    return Refuse(n, 0, nullptr, response,
                  absl::ResourceExhaustedError(
                      absl::StrCat("no memory for a frame of ", n, " bytes from ", what_, "; retry later")),
                  oversized);
  }
  uint8_t* dst = static_cast<uint8_t*>(own->data());
  const size_t ahead = static_cast<size_t>(std::min<uint64_t>(end_ - begin_, n));  // <= charged
  if (ahead > 0) std::memcpy(dst, static_cast<uint8_t*>(chunk_->data()) + begin_, ahead);
  begin_ += ahead;
  for (uint64_t got = ahead; got < n;) {
    if (got == charged) {  // budget_ != nullptr: without one, charged == n
      const uint64_t step = std::min<uint64_t>(n - charged, kBudgetStepBytes);
      if (!budget_->TryAcquire(step)) {
        // Outgrew the budget: answered from its header, the rest dropped,
        // and what it held given back before the (maybe long) skip.
        uint8_t head[kHeaderBytes];
        std::memcpy(head, dst, kHeaderBytes);  // got >= a step > a header
        absl::Status why = OverBudget(n, got);
        own.reset();
        give_back(charged);
        return Refuse(n, got, head, response, std::move(why), oversized);
      }
      charged += step;
    }
    size_t r = 0;
    s = ReadSome(dst + got, static_cast<size_t>(charged - got), &r);
    if (!s.ok()) {
      own.reset();
      give_back(charged);
      return s;
    }
    got += r;
  }
  if (budget_ != nullptr) {
    own = std::make_shared<TensorBuffer>(own->data(), own->size(),
                                         [own, budget = budget_, n](void*) { budget->Release(n); });
  }
  *body = std::move(own);
  return absl::OkStatus();
}

// ------------------------------------------------------------ FrameWriter

FrameWriter::FrameWriter(int fd, std::string what, absl::Duration send_timeout, size_t max_queued_frames)
    : fd_(fd), what_(std::move(what)), send_timeout_(send_timeout), max_queued_frames_(max_queued_frames) {
  thread_ = std::thread([this] { Loop(); });
}

FrameWriter::~FrameWriter() { Close(); }

bool FrameWriter::Send(std::unique_ptr<OutFrame> frame, bool may_wait) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || !broken_.ok() || overflowed_) return false;
    if (max_queued_frames_ > 0 && queue_.size() >= max_queued_frames_) {
      // Not cleared here: a sender may be writing from the front frame.
      // The owner's reader wakes and closes the writer, which drops them.
      overflowed_ = true;
      ::shutdown(fd_, SHUT_RDWR);
      return false;
    }
    queue_.push_back(std::move(frame));
    if (queue_.size() == 1) front_deadline_ = FrameDeadline(queue_.front()->bytes());
    if (sending_ || corked_ > 0) return true;
    sending_ = true;
  }
  Drain(may_wait);
  return true;
}

void FrameWriter::Cork() {
  absl::MutexLock lock(&mu_);
  ++corked_;
}

void FrameWriter::Uncork() {
  {
    absl::MutexLock lock(&mu_);
    if (--corked_ > 0 || sending_ || queue_.empty() || closed_ || !broken_.ok()) return;
    sending_ = true;
  }
  Drain(/*wait=*/false);
}

absl::Status FrameWriter::broken() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

bool FrameWriter::overflowed() const {
  absl::MutexLock lock(&mu_);
  return overflowed_;
}

void FrameWriter::BreakLocked(absl::Status why) {
  if (broken_.ok()) broken_ = std::move(why);
  queue_.clear();
  sent_of_front_ = 0;
  sending_ = false;
  handed_over_ = false;
}

absl::Time FrameWriter::FrameDeadline(size_t bytes) const {
  return absl::Now() + send_timeout_ + absl::Seconds(static_cast<double>(bytes) / kMinSendBytesPerSecond);
}

void FrameWriter::Drain(bool wait) {
  std::vector<iovec> iov;
  absl::Time stalled_since = absl::InfiniteFuture();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (closed_ || !broken_.ok()) {
        BreakLocked(absl::CancelledError("closed"));
        return;
      }
      if (queue_.empty()) {
        sending_ = false;
        handed_over_ = false;
        return;
      }
      // Every queued frame (up to the iovec limit) in one sendmsg.
      iov.clear();
      size_t skip = sent_of_front_;
      for (const std::unique_ptr<OutFrame>& f : queue_) {
        for (const iovec& v : f->iov()) {
          if (skip >= v.iov_len) {
            skip -= v.iov_len;
            continue;
          }
          iov.push_back({static_cast<char*>(v.iov_base) + skip, v.iov_len - skip});
          skip = 0;
          if (iov.size() == kMaxIov) break;
        }
        if (iov.size() == kMaxIov) break;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
    ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      stalled_since = absl::InfiniteFuture();
      absl::MutexLock lock(&mu_);
      size_t left = static_cast<size_t>(n);
      while (left > 0 && !queue_.empty()) {
        const size_t rest = queue_.front()->bytes() - sent_of_front_;
        if (left >= rest) {
          left -= rest;
          queue_.pop_front();
          sent_of_front_ = 0;
          if (!queue_.empty()) front_deadline_ = FrameDeadline(queue_.front()->bytes());
        } else {
          sent_of_front_ += left;
          left = 0;
        }
      }
      continue;
    }
    const int err = errno;
    if (n < 0 && err == EINTR) continue;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
      if (!wait) {
        // The socket is full: the writer's thread waits for it, not the caller.
        absl::MutexLock lock(&mu_);
        handed_over_ = true;
        return;
      }
      const absl::Time now = absl::Now();
      if (stalled_since == absl::InfiniteFuture()) stalled_since = now;
      absl::Status late;
      {
        absl::MutexLock lock(&mu_);
        // A peer that reads a little now and then must not hold a frame
        // (and what it holds) for ever: each frame has a deadline as a
        // whole, not only between bytes.
        if (now - stalled_since > send_timeout_) {
          late = absl::DeadlineExceededError(absl::StrCat(what_, " took no bytes for ",
                                                          absl::FormatDuration(send_timeout_), ": connection given up"));
        } else if (!queue_.empty() && now > front_deadline_) {
          late = absl::DeadlineExceededError(absl::StrCat(
              what_, " did not take a whole frame of ", queue_.front()->bytes(), " bytes in time (",
              absl::FormatDuration(send_timeout_), " and a second per ", kMinSendBytesPerSecond >> 10,
              " KiB; it took ", sent_of_front_, "): connection given up"));
        }
        if (!late.ok()) BreakLocked(late);
      }
      if (!late.ok()) {
        ::shutdown(fd_, SHUT_RDWR);  // its reader wakes and fails what is in flight
        return;
      }
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      BreakLocked(absl::UnavailableError(absl::StrCat("send to ", what_, ": ", net::ErrnoText(err))));
    }
    ::shutdown(fd_, SHUT_RDWR);
    return;
  }
}

void FrameWriter::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return handed_over_ || closed_; };
      mu_.Await(absl::Condition(&work));
      if (!handed_over_) return;  // closed, and nothing of ours to finish
    }
    Drain(/*wait=*/true);
  }
}

void FrameWriter::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    if (broken_.ok()) broken_ = absl::CancelledError(absl::StrCat("the connection to ", what_, " was closed"));
    if (!sending_) queue_.clear();  // else the sender clears it when it sees closed_
  }
  ::shutdown(fd_, SHUT_RDWR);  // a send in progress fails at once; a reader wakes
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !sending_; };
    mu_.Await(absl::Condition(&idle));
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace tcpframe
}  // namespace psrt
