// gRPC channel settings for every daemon, and a cache of channels by address.
//
// Channels carry large messages (tensors of hundreds of MiB) and reconnect
// quickly after a peer restarts (gRPC's default reconnect backoff grows to
// two minutes, far longer than recovery may take here).
//
//   ChannelCache channels(RpcOptions{});
//   auto stub = ParameterServer::NewStub(channels.Get("localhost:2222"));
//
// ChannelCache is thread-safe.
#ifndef PSRT_COMMON_RPC_CHANNEL_CACHE_H_
#define PSRT_COMMON_RPC_CHANNEL_CACHE_H_

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc/security.h"
#include "grpcpp/channel.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace psrt {

struct RpcOptions {
  int max_message_bytes = 1 << 30;  // 1 GiB each way
  absl::Duration initial_reconnect_backoff = absl::Milliseconds(50);
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
  // Also how soon gRPC 1.51 retries after a refused connection, so it bounds
  // how fast a restarted peer is reached again.
  absl::Duration min_connect_timeout = absl::Seconds(1);
  absl::Duration keepalive_time = absl::Seconds(10);
  // TLS and/or token for every channel and server made with these options.
  TransportSecurity security;
  // Server side: most concurrent calls per client connection (0 = gRPC's
  // default), and the memory gRPC may hold for calls in flight (0 = no
  // quota); above it new calls wait or are refused instead of growing.
  int max_concurrent_streams = 0;
  int64_t max_server_memory_bytes = 0;
};

grpc::ChannelArguments ClientChannelArguments(const RpcOptions& options);
// Applies the message limits to a server being built.
void ConfigureServerBuilder(const RpcOptions& options, grpc::ServerBuilder* builder);

// A new channel to `address` with the options' credentials (see Get).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const RpcOptions& options);

class ChannelCache {
 public:
  explicit ChannelCache(RpcOptions options = RpcOptions()) : options_(options) {}

  // The channel to `address`, made on first use (with the options' TLS
  // credentials and token, if any).
  std::shared_ptr<grpc::Channel> Get(const std::string& address);
  // Forgets the channel, so the next Get makes a fresh connection.
  void Drop(const std::string& address);

 private:
  const RpcOptions options_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_CHANNEL_CACHE_H_
