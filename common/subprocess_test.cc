#include "common/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(SubprocessTest, CapturesLinesAndExitStatus) {
  absl::Mutex mu;
  std::vector<std::string> lines;
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "echo one; echo two >&2; printf three; exit 3"};
  o.on_line = [&](absl::string_view l) {
    absl::MutexLock lock(&mu);
    lines.emplace_back(l);
  };
  {
    auto p = Subprocess::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    auto status = (*p)->Wait(absl::Seconds(30));
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(DescribeWaitStatus(*status), "exit 3");
  }  // joins the reader
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two", "three"}));
}

// on_end comes after the last line, once every holder of the output has
// closed it: here the child's own child, which outlives it by a moment.
TEST(SubprocessTest, OnEndFollowsTheLastLineOfEveryWriter) {
  absl::Mutex mu;
  std::vector<std::string> lines;
  bool ended = false;
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "(read x < /dev/null; echo grandchild) & echo child"};
  o.on_line = [&](absl::string_view l) {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(ended) << "a line after the end: " << l;
    lines.emplace_back(l);
  };
  o.on_end = [&] {
    absl::MutexLock lock(&mu);
    ended = true;
  };
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->Wait(absl::Seconds(30)).ok());
  absl::MutexLock lock(&mu);
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(30)));
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"child", "grandchild"}));
}

TEST(SubprocessTest, KillAndTimeout) {
  SubprocessOptions o;
  o.argv = {"/bin/sleep", "100"};
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->Wait(absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*p)->Running());
  EXPECT_TRUE((*p)->Signal(SIGKILL));
  auto status = (*p)->Wait(absl::Seconds(30));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(DescribeWaitStatus(*status), "killed by SIGKILL");
  EXPECT_FALSE((*p)->Signal(SIGTERM));  // already reaped
}

TEST(SubprocessTest, DestructorReapsARunningChild) {
  pid_t pid;
  {
    SubprocessOptions o;
    o.argv = {"/bin/sleep", "100"};
    auto p = Subprocess::Start(o);
    ASSERT_TRUE(p.ok());
    pid = (*p)->pid();
  }
  EXPECT_NE(::kill(pid, 0), 0);  // gone, and reaped (no zombie to signal)
}

TEST(SubprocessTest, ExecFailureIsExit127) {
  SubprocessOptions o;
  o.argv = {"/nonexistent/binary"};
  auto p = Subprocess::Start(o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(DescribeWaitStatus(*(*p)->Wait(absl::Seconds(30))), "exit 127");
}

TEST(SubprocessTest, FreePortsAreUsable) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  EXPECT_GT(*port, 0);
}

TEST(SubprocessTest, FreePortsAreDistinctAndOutsideTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  ASSERT_TRUE(range >> low >> high);
  std::set<int> seen;
  for (int i = 0; i < 50; ++i) {
    auto port = PickFreePort();
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_TRUE(seen.insert(*port).second) << *port << " handed out twice";
    if (low > 11000) EXPECT_LT(*port, low);
  }
}

}  // namespace
}  // namespace psrt
