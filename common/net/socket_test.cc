// Listening sockets are never shared: a port another socket listens on is
// refused with a sentence that says so, by Listen and by ProbeListen.
#include "common/net/socket.h"

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace net {
namespace {

TEST(ListenTest, APortInUseIsRefusedSayingSo) {
  absl::StatusOr<Listener> first = Listen("127.0.0.1", 0, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string in_use =
      absl::StrCat("cannot listen on 127.0.0.1:", first->port, ": the port is in use by another process");

  absl::StatusOr<Listener> second = Listen("127.0.0.1", first->port, 0);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(), in_use);

  absl::Status probe = ProbeListen("127.0.0.1", first->port);
  EXPECT_EQ(probe.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(probe.message(), in_use);
  // Every interface includes loopback.
  EXPECT_EQ(ProbeListen("", first->port).code(), absl::StatusCode::kUnavailable);
}

TEST(ListenTest, AFreePortProbesFreeAndStaysFree) {
  int port = 0;
  {
    absl::StatusOr<Listener> l = Listen("127.0.0.1", 0, 0);
    ASSERT_TRUE(l.ok()) << l.status();
    port = l->port;
  }
  EXPECT_TRUE(ProbeListen("127.0.0.1", port).ok());
  EXPECT_TRUE(ProbeListen("127.0.0.1", 0).ok());
  // The probe let go of it.
  EXPECT_TRUE(Listen("127.0.0.1", port, 0).ok());
}

TEST(ListenTest, BindErrorsAreSentences) {
  EXPECT_EQ(BindErrorText(EADDRINUSE), "the port is in use by another process");
  EXPECT_EQ(BindErrorText(EACCES), "permission denied (a port below 1024 needs privileges)");
}

}  // namespace
}  // namespace net
}  // namespace psrt
