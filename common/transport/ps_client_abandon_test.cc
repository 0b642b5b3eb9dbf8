// PsClient::Abandon, the worker's side of a failover: calls in flight to a
// PS the chief gave up on end at once with CANCELLED, and none is sent to
// it until the next route. The "PS" is a socket that listens and never
// answers (a stopped process's: the kernel completes the connection, no
// byte comes back), so without Abandon each call would run to its deadline.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/transport/ps_client.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

class Silent {
 public:
  Silent() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
  }
  ~Silent() {
    if (conn_ >= 0) ::close(conn_);
    ::close(fd_);
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  // Blocks until a client connects (the call is on its way); keeps the
  // connection open and silent.
  void AcceptOne() { conn_ = ::accept(fd_, nullptr, nullptr); }

 private:
  int fd_ = -1, conn_ = -1, port_ = 0;
};

TEST(PsClientAbandonTest, CancelsCallsInFlightAndSendsNoneUntilTheNextRoute) {
  Silent ps;
  PlacementMap placement;
  VariablePlacement* vp = placement.add_variable();
  vp->mutable_variable()->set_name("w");
  vp->mutable_variable()->mutable_shape()->add_dim(4);
  vp->add_shard()->set_ps_task(0);
  ChannelCache channels;
  PsClientOptions o;
  o.timeout = absl::Seconds(3);
  PsClient client(placement, {ps.address()}, &channels, o);
  ReplicaRoute route;
  route.set_epoch(7);
  route.add_store_task(0);
  client.SetRoute(route);
  const TensorMap grads = {{"w", Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({4}))}};
  RequestId id;
  id.set_step(1);

  absl::Status in_flight;
  std::thread pusher([&] { in_flight = client.Push(id, grads, {}); });
  ps.AcceptOne();  // the push is on the wire, its context listed
  client.Abandon({0});
  pusher.join();
  EXPECT_EQ(in_flight.code(), absl::StatusCode::kCancelled) << in_flight << " (DEADLINE_EXCEEDED: not cancelled)";

  // Abandoned: refused before anything is sent.
  absl::Status refused = client.Push(id, grads, {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kCancelled) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "ps:0 was given up on by the chief")) << refused;

  // A new route lifts it: the call goes out again (and, unanswered, fails
  // on the transport's deadline or handshake, not by Abandon).
  client.SetRoute(route);
  absl::Status sent = client.Push(id, grads, {});
  EXPECT_NE(sent.code(), absl::StatusCode::kCancelled) << sent;
  EXPECT_FALSE(sent.ok());
  EXPECT_FALSE(absl::StrContains(sent.message(), "given up on")) << sent;
}

}  // namespace
}  // namespace psrt
