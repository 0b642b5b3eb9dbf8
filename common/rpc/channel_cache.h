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
  // quota, < 0 = ServerMemoryQuota's default); above it new calls wait or
  // are refused instead of growing.
  int max_concurrent_streams = 0;
  int64_t max_server_memory_bytes = 0;
  // Server side: the largest message a server accepts (0 = max_message_bytes).
  // gRPC receives a message whole before any handler (the token check
  // included) sees it, so this bounds what a stranger can make it buffer.
  int max_receive_message_bytes = 0;
  // Server side: a connection that has not finished its TLS and HTTP/2
  // handshake by then is closed (0 = gRPC's default, 120 s).
  absl::Duration handshake_timeout = absl::Seconds(10);
};

grpc::ChannelArguments ClientChannelArguments(const RpcOptions& options);
// Applies the message, memory and handshake limits to a server being built.
void ConfigureServerBuilder(const RpcOptions& options, grpc::ServerBuilder* builder);
// The largest message a server made with `options` accepts.
int ServerReceiveLimit(const RpcOptions& options);
// The memory quota of a server made with `options`, in bytes (0 = none):
// max_server_memory_bytes, or where that is < 0, four times the largest
// message it accepts and at least 256 MiB, so that a few calls at the limit
// fit while a crowd of them is refused.
int64_t ServerMemoryQuota(const RpcOptions& options);

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
