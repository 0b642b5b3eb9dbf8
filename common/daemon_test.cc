#include "common/daemon.h"

#include <sys/resource.h>

#include "gtest/gtest.h"

namespace psrt {
namespace {

// A daemon started under a low soft limit (1,024 is common) takes all the
// hard limit allows: gRPC stopped accepting for good when a crowd of
// connections used up the soft one.
TEST(DaemonTest, TheDescriptorLimitIsRaisedToTheHardLimit) {
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max < 2) GTEST_SKIP() << "hard limit " << lim.rlim_max;
  const rlim_t hard = lim.rlim_max;
  lim.rlim_cur = std::min<rlim_t>(hard - 1, 64);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
  RaiseDescriptorLimit();
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  EXPECT_EQ(lim.rlim_cur, hard);
}

}  // namespace
}  // namespace psrt
