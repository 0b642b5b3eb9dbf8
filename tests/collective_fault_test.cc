// The TCP ring across real processes: ranks are forked children on
// loopback; one is SIGKILLed or SIGSTOPped in the middle of a stream of
// all-reduces, and the survivors must fail promptly with the documented
// status instead of hanging.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/collective/collective_testing.h"
#include "common/collective/tcp_ring.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

struct Child {
  pid_t pid = -1;
  int pipe = -1;  // the child writes 'F' once formed and working, then its final status code
};

// Reads exactly `len` bytes from `fd` before `deadline`; false if it cannot.
bool ReadWithin(int fd, void* out, size_t len, absl::Time deadline) {
  size_t got = 0;
  while (got < len) {
    pollfd p{fd, POLLIN, 0};
    int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (ms <= 0 || ::poll(&p, 1, ms) <= 0) return false;
    ssize_t k = ::read(fd, static_cast<char*>(out) + got, len - got);
    if (k <= 0) return false;
    got += k;
  }
  return true;
}

// The child's life: form the ring, signal the parent, all-reduce until an
// error, report its code.
[[noreturn]] void RunRank(CollectiveListener* listener, TcpRingOptions o, int report) {
  auto ring = TcpRingCollective::Create(listener, o);
  int32_t code = static_cast<int32_t>(ring.status().code());
  if (ring.ok()) {
    std::vector<float> data(1 << 20, 1.0f);
    absl::Status st = (*ring)->AllReduceSum(data.data(), data.size());
    if (st.ok() && ::write(report, "F", 1) != 1) _exit(2);
    for (int i = 0; st.ok() && i < 100000; ++i) {
      std::fill(data.begin(), data.end(), 1.0f);
      st = (*ring)->AllReduceSum(data.data(), data.size());
    }
    code = static_cast<int32_t>(st.code());
  }
  if (::write(report, &code, sizeof(code)) != sizeof(code)) _exit(2);
  _exit(0);
}

class RingProcesses : public ::testing::Test {
 protected:
  void Start(int n, absl::Duration timeout) {
    auto ls = testing::BindLoopback(n);
    ASSERT_TRUE(ls.ok()) << ls.status();
    for (int r = 0; r < n; ++r) {
      int fds[2];
      ASSERT_EQ(0, ::pipe(fds));
      TcpRingOptions o;
      o.rank = r;
      o.size = n;
      o.peers = ls->peers;
      o.group_id = 9;
      o.token = "fault-test-token-0123";
      o.timeout = timeout;
      o.connect_timeout = absl::Seconds(20);
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(fds[0]);
        RunRank(ls->l[r].get(), o, fds[1]);
      }
      ::close(fds[1]);
      children_.push_back({pid, fds[0]});
    }
    for (int r = 0; r < n; ++r) {
      char f = 0;
      ASSERT_TRUE(ReadWithin(children_[r].pipe, &f, 1, absl::Now() + absl::Seconds(30))) << "rank " << r;
      ASSERT_EQ(f, 'F');
    }
  }

  // The final status code of rank r, or -1 if it did not report before `deadline`.
  int Code(int r, absl::Time deadline) {
    int32_t code = -1;
    return ReadWithin(children_[r].pipe, &code, sizeof(code), deadline) ? code : -1;
  }

  void TearDown() override {
    for (Child& c : children_) {
      ::kill(c.pid, SIGKILL);
      ::kill(c.pid, SIGCONT);
      ::waitpid(c.pid, nullptr, 0);
      ::close(c.pipe);
    }
  }

  std::vector<Child> children_;
};

TEST_F(RingProcesses, KilledRankGivesUnavailableOnEverySurvivor) {
  const absl::Duration timeout = absl::Seconds(10);
  ASSERT_NO_FATAL_FAILURE(Start(3, timeout));
  const absl::Time killed = absl::Now();
  ASSERT_EQ(0, ::kill(children_[1].pid, SIGKILL));
  for (int r : {0, 2}) {
    EXPECT_EQ(Code(r, killed + timeout / 2), static_cast<int>(absl::StatusCode::kUnavailable)) << "rank " << r;
  }
  EXPECT_LT(absl::Now() - killed, timeout / 2);
}

TEST_F(RingProcesses, StoppedRankGivesDeadlineExceeded) {
  const absl::Duration timeout = absl::Milliseconds(500);
  ASSERT_NO_FATAL_FAILURE(Start(3, timeout));
  const absl::Time stopped = absl::Now();
  ASSERT_EQ(0, ::kill(children_[1].pid, SIGSTOP));
  // Both survivors stall. The first to notice fails with DEADLINE_EXCEEDED
  // and tears its links down, so the other sees either its own deadline or
  // that teardown (UNAVAILABLE).
  const int codes[2] = {Code(0, stopped + timeout * 6), Code(2, stopped + timeout * 6)};
  const int kDeadline = static_cast<int>(absl::StatusCode::kDeadlineExceeded);
  const int kUnavailable = static_cast<int>(absl::StatusCode::kUnavailable);
  for (int code : codes) EXPECT_TRUE(code == kDeadline || code == kUnavailable) << code;
  EXPECT_TRUE(codes[0] == kDeadline || codes[1] == kDeadline) << codes[0] << " " << codes[1];
  EXPECT_GE(absl::Now() - stopped, timeout * 0.9);
}

}  // namespace
}  // namespace psrt
