#include "common/store/hello_poller.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr size_t kHello = 8;
constexpr absl::Duration kWait = absl::Seconds(10);

// Every report, by id.
class Reports {
 public:
  HelloPoller::Done Sink() {
    return [this](uint64_t id, absl::StatusOr<std::string> hello) {
      absl::MutexLock lock(&mu_);
      EXPECT_FALSE(got_.contains(id)) << "reported twice: " << id;
      got_.emplace(id, std::move(hello));
    };
  }
  // The report of `id`, waiting for it up to kWait; UNKNOWN if none came.
  absl::StatusOr<std::string> Await(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto in = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return got_.contains(id); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&in), kWait)) return absl::UnknownError("no report");
    return got_.at(id);
  }
  bool Has(uint64_t id) {
    absl::MutexLock lock(&mu_);
    return got_.contains(id);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, absl::StatusOr<std::string>> got_ ABSL_GUARDED_BY(mu_);
};

struct Pair {
  net::Fd ours, theirs;
};
Pair Connected() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return Pair{net::Fd(fds[0]), net::Fd(fds[1])};
}

TEST(HelloPollerTest, AHelloInPiecesIsReportedWholeAndWhatFollowsItIsLeftUnread) {
  Reports reports;
  auto poller = HelloPoller::Start(kHello, reports.Sink());
  ASSERT_TRUE(poller.ok()) << poller.status();
  Pair p = Connected();
  (*poller)->Add(7, p.ours.get(), absl::Now() + kWait);
  ASSERT_EQ(::write(p.theirs.get(), "hel", 3), 3);
  ASSERT_EQ(::write(p.theirs.get(), "lo!!FRAME", 9), 9);
  absl::StatusOr<std::string> hello = reports.Await(7);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(*hello, "hello!!F");
  char rest[8] = {};
  EXPECT_EQ(::read(p.ours.get(), rest, sizeof(rest)), 4);
  EXPECT_EQ(std::string(rest, 4), "RAME");
  EXPECT_EQ((*poller)->pending(), 0);
}

TEST(HelloPollerTest, TheDeadlineIsTheWholeHellosAndAPeerThatClosesIsReported) {
  Reports reports;
  auto poller = HelloPoller::Start(kHello, reports.Sink());
  ASSERT_TRUE(poller.ok()) << poller.status();
  Pair slow = Connected();
  Pair gone = Connected();
  const absl::Time start = absl::Now();
  (*poller)->Add(1, slow.ours.get(), start + absl::Milliseconds(200));
  (*poller)->Add(2, gone.ours.get(), start + kWait);
  gone.theirs = net::Fd();
  absl::StatusOr<std::string> closed = reports.Await(2);
  EXPECT_EQ(closed.status().code(), absl::StatusCode::kUnavailable) << closed.status();
  // A byte every 50 ms (the whole hello would take 400 ms) is refused at its
  // deadline however steadily it comes.
  while (!reports.Has(1) && absl::Now() - start < kWait) {
    (void)!::write(slow.theirs.get(), "h", 1);
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 50);  // the pacing of the trickle, not a synchronisation
  }
  absl::StatusOr<std::string> late = reports.Await(1);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(HelloPollerTest, ShutdownReportsEveryConnectionHeldAndLaterOnesAsCancelled) {
  Reports reports;
  auto poller = HelloPoller::Start(kHello, reports.Sink());
  ASSERT_TRUE(poller.ok()) << poller.status();
  std::vector<Pair> pairs;
  for (int i = 0; i < 100; ++i) {
    pairs.push_back(Connected());
    (*poller)->Add(i, pairs.back().ours.get(), absl::InfiniteFuture());
  }
  const absl::Time start = absl::Now();
  (*poller)->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(reports.Has(i)) << i;
    EXPECT_EQ(reports.Await(i).status().code(), absl::StatusCode::kCancelled);
  }
  EXPECT_EQ((*poller)->pending(), 0);
  Pair late = Connected();
  (*poller)->Add(1000, late.ours.get(), absl::InfiniteFuture());
  EXPECT_EQ(reports.Await(1000).status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace psrt
