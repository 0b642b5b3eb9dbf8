#include "common/rpc/channel_cache.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace psrt {

grpc::ChannelArguments ClientChannelArguments(const RpcOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              absl::ToInt64Milliseconds(options.initial_reconnect_backoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              absl::ToInt64Milliseconds(options.initial_reconnect_backoff));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              absl::ToInt64Milliseconds(options.max_reconnect_backoff));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, absl::ToInt64Milliseconds(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Each cache entry gets its own connection rather than sharing a global
  // subchannel pool, so dropping one really reconnects.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

void ConfigureServerBuilder(const RpcOptions& options, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(options.max_message_bytes);
  builder->SetMaxSendMessageSize(options.max_message_bytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time) / 2));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

std::shared_ptr<grpc::Channel> ChannelCache::Get(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                           ClientChannelArguments(options_));
  channels_.emplace(address, channel);
  return channel;
}

void ChannelCache::Drop(const std::string& address) {
  absl::MutexLock lock(&mu_);
  channels_.erase(address);
}

}  // namespace psrt
