#include "common/store/hello_poller.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psrt {
namespace {

// The epoll data of the wake-up eventfd; connection ids are the owner's.
constexpr uint64_t kWakeId = std::numeric_limits<uint64_t>::max();
constexpr int kMaxEvents = 256;

void Wake(int fd) {
  const uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));  // EAGAIN: a wake-up is pending already
}

}  // namespace

absl::StatusOr<std::unique_ptr<HelloPoller>> HelloPoller::Start(size_t hello_bytes, Done done) {
  if (hello_bytes == 0) return absl::InvalidArgumentError("HelloPoller: a hello of 0 bytes");
  net::Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return absl::InternalError(absl::StrCat("epoll_create1: ", net::ErrnoText(errno)));
  net::Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return absl::InternalError(absl::StrCat("eventfd: ", net::ErrnoText(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", net::ErrnoText(errno)));
  }
  std::unique_ptr<HelloPoller> p(new HelloPoller(hello_bytes, std::move(done), std::move(epoll), std::move(wake)));
  p->thread_ = std::thread([q = p.get()] { q->Loop(); });
  return p;
}

HelloPoller::HelloPoller(size_t hello_bytes, Done done, net::Fd epoll, net::Fd wake)
    : hello_bytes_(hello_bytes), done_(std::move(done)), epoll_(std::move(epoll)), wake_(std::move(wake)) {}

HelloPoller::~HelloPoller() { Shutdown(); }

void HelloPoller::Add(uint64_t id, int fd, absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      Entry e;
      e.fd = fd;
      e.deadline = deadline;
      e.hello.resize(hello_bytes_);
      added_.emplace_back(id, std::move(e));
      ++pending_;
      Wake(wake_.get());
      return;
    }
  }
  done_(id, absl::CancelledError("shutting down"));
}

int HelloPoller::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_;
}

void HelloPoller::AdoptAdded() {
  std::vector<std::pair<uint64_t, Entry>> added;
  {
    absl::MutexLock lock(&mu_);
    added.swap(added_);
  }
  for (auto& [id, e] : added) {
    const int fd = e.fd;
    deadlines_.emplace(e.deadline, id);
    held_[id] = std::move(e);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      Finish(id, absl::UnavailableError(absl::StrCat("cannot await its hello: epoll_ctl: ", net::ErrnoText(errno))));
    }
  }
}

void HelloPoller::Loop() {
  epoll_event events[kMaxEvents];
  while (!stop_.load()) {
    AdoptAdded();
    int timeout_ms = -1;  // nothing to expire: until woken
    if (!deadlines_.empty()) {
      const absl::Duration left = absl::Ceil(deadlines_.begin()->first - absl::Now(), absl::Milliseconds(1));
      timeout_ms =
          static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 0, std::numeric_limits<int>::max()));
    }
    const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout_ms);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kWakeId) {
        uint64_t count;
        (void)!::read(wake_.get(), &count, sizeof(count));
      } else {
        ReadSome(events[i].data.u64);
      }
    }
    // n < 0: EINTR (or a bug of ours, EBADF/EINVAL: the deadlines still end
    // every connection, and Shutdown the loop).
    const absl::Time now = absl::Now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      Finish(deadlines_.begin()->second, absl::DeadlineExceededError("its hello did not come in time"));
    }
  }
}

void HelloPoller::ReadSome(uint64_t id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;  // reported already
  Entry& e = it->second;
  const ssize_t n = ::recv(e.fd, e.hello.data() + e.got, hello_bytes_ - e.got, MSG_DONTWAIT);
  if (n > 0) {
    e.got += static_cast<size_t>(n);
    if (e.got == hello_bytes_) Finish(id, std::move(e.hello));
  } else if (n == 0) {
    Finish(id, absl::UnavailableError("closed the connection before its hello"));
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    Finish(id, absl::UnavailableError(absl::StrCat("recv: ", net::ErrnoText(errno))));
  }
}

void HelloPoller::Finish(uint64_t id, absl::StatusOr<std::string> result) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
  deadlines_.erase({it->second.deadline, id});
  held_.erase(it);
  {
    absl::MutexLock lock(&mu_);
    --pending_;
  }
  done_(id, std::move(result));
}

void HelloPoller::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop_.store(true);
  Wake(wake_.get());
  if (thread_.joinable()) thread_.join();
  // The loop is gone: what it held, and what was added since it last
  // looked, is reported here.
  AdoptAdded();
  std::vector<uint64_t> ids;
  ids.reserve(held_.size());
  for (const auto& [id, e] : held_) ids.push_back(id);
  for (uint64_t id : ids) Finish(id, absl::CancelledError("shutting down"));
}

}  // namespace psrt
