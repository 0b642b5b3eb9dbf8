#include "common/rpc/channel_cache.h"

#include <algorithm>

#include "grpcpp/create_channel.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace psrt {
namespace {

// Adds the shared token to every call's metadata: one place for all stubs,
// generic (raw) calls included.
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* bearer) : bearer_(bearer) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      m->GetSendInitialMetadata()->insert({kAuthMetadataKey, *bearer_});
    }
    m->Proceed();
  }

 private:
  const std::string* bearer_;
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token) : bearer_(BearerValue(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(&bearer_);
  }

 private:
  const std::string bearer_;
};

}  // namespace

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const RpcOptions& options) {
  grpc::ChannelArguments args = ClientChannelArguments(options);
  if (options.security.tls() && !options.security.server_name_override.empty()) {
    args.SetSslTargetNameOverride(options.security.server_name_override);
  }
  auto creds = ChannelCredentialsFor(options.security);
  if (!options.security.token_auth()) return grpc::CreateCustomChannel(address, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<TokenInterceptorFactory>(options.security.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args,
                                                                 std::move(factories));
}

grpc::ChannelArguments ClientChannelArguments(const RpcOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              absl::ToInt64Milliseconds(options.initial_reconnect_backoff));
  // gRPC reads this as the shortest time a connection attempt may take (its
  // handshake included), not as a backoff: at 50 ms a loaded machine failed
  // healthy connections with "timed out before receiving SETTINGS frame";
  // at 5 s a refused connection was retried only every 5 s.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, absl::ToInt64Milliseconds(options.min_connect_timeout));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              absl::ToInt64Milliseconds(options.max_reconnect_backoff));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, absl::ToInt64Milliseconds(options.keepalive_time));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Each cache entry gets its own connection rather than sharing a global
  // subchannel pool, so dropping one really reconnects.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

int ServerReceiveLimit(const RpcOptions& options) {
  return options.max_receive_message_bytes > 0 ? options.max_receive_message_bytes : options.max_message_bytes;
}

int64_t ServerMemoryQuota(const RpcOptions& options) {
  if (options.max_server_memory_bytes >= 0) return options.max_server_memory_bytes;
  return std::max<int64_t>(int64_t{256} << 20, int64_t{4} * ServerReceiveLimit(options));
}

void ConfigureServerBuilder(const RpcOptions& options, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(ServerReceiveLimit(options));
  builder->SetMaxSendMessageSize(options.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same port
  // would then start and share its connections with the first (a second
  // cluster's tasks registered with the first's chief). Off, its bind fails.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time) / 2));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  if (options.max_concurrent_streams > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  }
  if (options.handshake_timeout > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                                static_cast<int>(absl::ToInt64Milliseconds(options.handshake_timeout)));
  }
  if (const int64_t quota_bytes = ServerMemoryQuota(options); quota_bytes > 0) {
    grpc::ResourceQuota quota("psrt-server");
    quota.Resize(static_cast<size_t>(quota_bytes));
    builder->SetResourceQuota(quota);
  }
}

std::shared_ptr<grpc::Channel> ChannelCache::Get(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  auto channel = MakeChannel(address, options_);
  channels_.emplace(address, channel);
  return channel;
}

void ChannelCache::Drop(const std::string& address) {
  absl::MutexLock lock(&mu_);
  channels_.erase(address);
}

}  // namespace psrt
