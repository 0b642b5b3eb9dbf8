// Real gRPC servers on real loopback sockets: large messages pass, a dead
// peer reads as UNAVAILABLE, and a retrying client reaches it once it is
// back on the same port.
#include "common/rpc/channel_cache.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/rpc/retry.h"
#include "common/rpc/status_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/chief_service.grpc.pb.h"

namespace psrt {
namespace {

class EchoChief : public Chief::Service {
 public:
  grpc::Status ReportFailure(grpc::ServerContext*, const ReportFailureRequest* req,
                             ReportFailureResponse*) override {
    last_error_size = req->error().size();
    return grpc::Status::OK;
  }
  grpc::Status JobStatus(grpc::ServerContext*, const JobStatusRequest*,
                         JobStatusResponse* resp) override {
    resp->set_step(42);
    return grpc::Status::OK;
  }
  std::atomic<size_t> last_error_size{0};
};

std::unique_ptr<grpc::Server> Serve(EchoChief* service, const std::string& address, int* port) {
  grpc::ServerBuilder builder;
  ConfigureServerBuilder(RpcOptions(), &builder);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

absl::Status CallJobStatus(ChannelCache* cache, const std::string& address) {
  auto stub = Chief::NewStub(cache->Get(address));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(2));
  JobStatusRequest req;
  JobStatusResponse resp;
  return FromGrpcStatus(stub->JobStatus(&ctx, req, &resp), address, "JobStatus");
}

TEST(StatusUtilTest, CodesAndMessagesSurviveTheEdge) {
  absl::Status s = absl::ResourceExhaustedError("too big");
  grpc::Status g = ToGrpcStatus(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(FromGrpcStatus(g), s);
  absl::Status named = FromGrpcStatus(g, "ps:0", "Push");
  EXPECT_EQ(named.message(), "ps:0: Push: too big");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(ChannelCacheTest, SameChannelPerAddressAndLargeMessagesPass) {
  EchoChief service;
  int port = 0;
  auto server = Serve(&service, "127.0.0.1:0", &port);
  ASSERT_NE(port, 0);
  std::string address = "127.0.0.1:" + std::to_string(port);
  ChannelCache cache;
  EXPECT_EQ(cache.Get(address), cache.Get(address));
  ASSERT_TRUE(CallJobStatus(&cache, address).ok());

  // 8 MiB: twice gRPC's default 4 MiB receive limit.
  auto stub = Chief::NewStub(cache.Get(address));
  grpc::ClientContext ctx;
  ReportFailureRequest req;
  req.set_error(std::string(8 << 20, 'e'));
  ReportFailureResponse resp;
  ASSERT_TRUE(stub->ReportFailure(&ctx, req, &resp).ok());
  EXPECT_EQ(service.last_error_size.load(), size_t{8 << 20});
  server->Shutdown();
}

// gRPC's default SO_REUSEPORT would let the second server start and share
// the first one's clients.
TEST(ChannelCacheTest, ASecondServerOnATakenPortDoesNotStart) {
  EchoChief service;
  int port = 0;
  auto first = Serve(&service, "127.0.0.1:0", &port);
  ASSERT_NE(first, nullptr);
  int second_port = 0;
  auto second = Serve(&service, "127.0.0.1:" + std::to_string(port), &second_port);
  EXPECT_EQ(second, nullptr);
  ChannelCache cache;
  EXPECT_TRUE(CallJobStatus(&cache, "127.0.0.1:" + std::to_string(port)).ok());
}

TEST(ChannelCacheTest, DeadPeerIsUnavailableAndRetryReachesItWhenBack) {
  EchoChief service;
  int port = 0;
  auto server = Serve(&service, "127.0.0.1:0", &port);
  std::string address = "127.0.0.1:" + std::to_string(port);
  ChannelCache cache;
  ASSERT_TRUE(CallJobStatus(&cache, address).ok());
  server->Shutdown();
  server.reset();
  EXPECT_EQ(CallJobStatus(&cache, address).code(), absl::StatusCode::kUnavailable);

  std::atomic<int> attempts{0};
  absl::Notification restarted;
  std::unique_ptr<grpc::Server> second;
  std::thread restarter([&] {
    // Bring the peer back only once the client has seen it down twice.
    while (attempts.load() < 2) std::this_thread::yield();
    int again = 0;
    second = Serve(&service, address, &again);
    restarted.Notify();
  });
  BackoffOptions o;
  o.initial = absl::Milliseconds(20);
  o.max = absl::Milliseconds(200);
  o.deadline = absl::Seconds(20);
  absl::Status s = RetryOnUnavailable(o, [&] {
    ++attempts;
    return CallJobStatus(&cache, address);
  });
  restarter.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(attempts.load(), 3);
  ASSERT_TRUE(restarted.HasBeenNotified());
  second->Shutdown();
}

}  // namespace
}  // namespace psrt
