#include "common/net/source_limit.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace net {
namespace {

TEST(SourceLimitTest, EachSourceHoldsAtMostItsPlacesAndReleasedOnesComeBack) {
  SourceLimit limit(2, "test", absl::ZeroDuration());
  std::vector<SourceLimit::Place> held;
  for (int i = 0; i < 2; ++i) {
    auto p = limit.Take("127.0.0.2");
    ASSERT_TRUE(p.has_value());
    held.push_back(*std::move(p));
  }
  EXPECT_FALSE(limit.Take("127.0.0.2").has_value());
  EXPECT_TRUE(limit.Take("127.0.0.3").has_value());  // another source is not counted with it
  EXPECT_EQ(limit.held("127.0.0.2"), 2);
  held[0].Release();
  held[0].Release();  // twice gives back once
  EXPECT_EQ(limit.held("127.0.0.2"), 1);
  EXPECT_TRUE(limit.Take("127.0.0.2").has_value());  // and destroyed at once
  held.clear();
  EXPECT_EQ(limit.held("127.0.0.2"), 0);
}

TEST(SourceLimitTest, RefusalsAreSaidOncePerIntervalWithTheirCount) {
  SourceLimit limit(1, "TCP data plane (--flag)", absl::Hours(1));
  const std::string first = limit.Refuse("10.0.0.1");
  EXPECT_NE(first.find("TCP data plane (--flag): refused 1 connection (the last from 10.0.0.1)"), std::string::npos)
      << first;
  EXPECT_EQ(limit.Refuse("10.0.0.1"), "");
  EXPECT_EQ(limit.Refuse("10.0.0.1"), "");
  EXPECT_EQ(limit.refused(), 3);
}

TEST(SourceLimitTest, NoLimitCountsNothing) {
  SourceLimit limit(0, "test");
  std::vector<SourceLimit::Place> held;
  for (int i = 0; i < 1000; ++i) held.push_back(*limit.Take("a"));
  EXPECT_EQ(limit.held("a"), 0);
}

TEST(SourceLimitTest, AnIpv4MappedAddressIsItsIpv4Address) {
  sockaddr_storage s{};
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(1234);
  ASSERT_EQ(::inet_pton(AF_INET6, "::ffff:127.0.0.9", &v6->sin6_addr), 1);
  EXPECT_EQ(SourceAddress(s), "127.0.0.9");
  ASSERT_EQ(::inet_pton(AF_INET6, "::1", &v6->sin6_addr), 1);
  EXPECT_EQ(SourceAddress(s), "::1");
  sockaddr_storage t{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&t);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(99);
  ASSERT_EQ(::inet_pton(AF_INET, "127.0.0.2", &v4->sin_addr), 1);
  EXPECT_EQ(SourceAddress(t), "127.0.0.2");
}

}  // namespace
}  // namespace net
}  // namespace psrt
