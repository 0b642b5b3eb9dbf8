// PsTcpChannel's first connection: one failed connection attempt to a PS
// leaves the gRPC channel in TRANSIENT_FAILURE, where a plain call fails at
// once. CI saw that on a client's first call to a PS that was serving ("failed
// to connect to all addresses ... No such file or directory"), and a worker
// parks over it. Here the PS starts only once the channel has failed to
// connect: the one more try that waits for gRPC's reconnect reaches it. A PS
// that never comes fails within the reconnect wait, with the first status.
// (Once a PS has answered, a failure is fast again: a failover does not wait
// on a dead PS.)
#include "common/transport/ps_tcp_channel.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/rpc/channel_cache.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/ps_service.grpc.pb.h"

namespace psrt {
namespace {

// A port nothing listens on (bound, read, closed).
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A PS that offers no TCP data plane and counts the OpenDataPlane calls it
// answers.
class CountingPs final : public ParameterServer::Service {
 public:
  grpc::Status OpenDataPlane(grpc::ServerContext*, const OpenDataPlaneRequest*,
                             OpenDataPlaneResponse* response) override {
    ++calls;
    response->set_port(0);
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
};

// Waits until `channel` has failed a connection attempt; false at `deadline`.
bool WaitForFailedConnect(grpc::Channel* channel, absl::Time deadline) {
  grpc_connectivity_state state = channel->GetState(false);
  while (state != GRPC_CHANNEL_TRANSIENT_FAILURE) {
    if (!channel->WaitForStateChange(state, absl::ToChronoTime(deadline))) return false;
    state = channel->GetState(false);
  }
  return true;
}

TEST(PsTcpChannelTest, AFailedFirstConnectionIsRetriedUntilThePsAnswers) {
  const std::string address = absl::StrCat("127.0.0.1:", UnusedPort());
  std::shared_ptr<grpc::Channel> channel = MakeChannel(address, RpcOptions());
  PsTcpChannelOptions o;
  o.connect_timeout = absl::Seconds(60);
  o.reconnect_wait = absl::Seconds(30);  // generous: a loaded machine starts the PS slowly
  PsTcpChannel c(channel, address, "ps:0", o);

  CountingPs ps;
  std::unique_ptr<grpc::Server> server;
  std::thread starter([&] {
    ASSERT_TRUE(WaitForFailedConnect(channel.get(), absl::Now() + absl::Seconds(60)))
        << "the first connection attempt never failed";
    grpc::ServerBuilder b;
    b.AddListeningPort(address, grpc::InsecureServerCredentials());
    b.RegisterService(&ps);
    server = b.BuildAndStart();
    ASSERT_NE(server, nullptr) << "could not listen on " << address;
  });
  // Opening: the first OpenDataPlane fails (nothing listens), the second
  // waits for the reconnect. The PS offers no data plane: the stream is used.
  EXPECT_FALSE(c.CanRoute());
  starter.join();
  EXPECT_EQ(ps.calls.load(), 1) << "the open was not retried once the PS listened";
  if (server != nullptr) server->Shutdown(absl::ToChronoTime(absl::Now()));
}

TEST(PsTcpChannelTest, APsThatNeverListensFailsWithinTheReconnectWait) {
  const std::string address = absl::StrCat("127.0.0.1:", UnusedPort());
  PsTcpChannelOptions o;
  o.connect_timeout = absl::Seconds(60);
  o.reconnect_wait = absl::Milliseconds(200);
  PsTcpChannel c(MakeChannel(address, RpcOptions()), address, "ps:0", o);
  absl::Notification ended;
  absl::Status status;
  c.Start(psframe::Method::kPull, grpc::ByteBuffer(), absl::Seconds(60), CallRoute(),
          [&](absl::StatusOr<grpc::ByteBuffer> r) {
            status = r.status();
            ended.Notify();
          });
  // Well before the 60 s connect timeout: the retry waits its 200 ms.
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the open waited for its connect timeout, not the reconnect wait";
  // The first status (no connection), not the retry's deadline.
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "OpenDataPlane")) << status;
}

}  // namespace
}  // namespace psrt
