// StartServer on a port another server holds: refused with the address and
// the reason, while the first goes on serving.
#include "common/rpc/serve.h"

#include "absl/strings/str_cat.h"
#include "common/net/socket.h"
#include "gtest/gtest.h"
#include "proto/chief_service.grpc.pb.h"

namespace psrt {
namespace {

TEST(StartServerTest, APortInUseIsRefusedSayingSo) {
  absl::StatusOr<net::Listener> held = net::Listen("127.0.0.1", 0, 0);
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string listen = absl::StrCat("127.0.0.1:", held->port);
  Chief::Service service;
  auto server = StartServer(listen, RpcOptions(), {&service});
  ASSERT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(server.status().message(),
            absl::StrCat("cannot listen on ", listen, ": the port is in use by another process"));
}

TEST(StartServerTest, ASecondGrpcServerOnTheSamePortIsRefused) {
  int port = 0;
  {
    absl::StatusOr<net::Listener> l = net::Listen("127.0.0.1", 0, 0);
    ASSERT_TRUE(l.ok()) << l.status();
    port = l->port;
  }
  const std::string listen = absl::StrCat("127.0.0.1:", port);
  Chief::Service a, b;
  auto first = StartServer(listen, RpcOptions(), {&a});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StartServer(listen, RpcOptions(), {&b});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(),
            absl::StrCat("cannot listen on ", listen, ": the port is in use by another process"));
  (*first)->Shutdown();
}

TEST(StartServerTest, AnAddressThatIsNotHostPortIsRefused) {
  Chief::Service service;
  auto server = StartServer("127.0.0.1", RpcOptions(), {&service});
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.status().message(), "cannot listen on '127.0.0.1': not host:port");
}

}  // namespace
}  // namespace psrt
