// PsTcpChannel: the worker's end of the PS data plane over plain TCP
// (tcp_frame.h). Pull, PullRows, Push and PushRows travel as frames of one
// TCP connection to the PS, matched to their answers by id, with no gRPC on
// the way: what ps_bench measured as most of a small call's cost (HTTP/2
// framing, completion queues, callback threads) is gone, and a tensor
// crosses with no copy but the kernel's on either side.
//
// The connection is opened on first use: an OpenDataPlane call on the PS's
// gRPC channel (authenticated as every call there: TLS certificate, token)
// gives the data port and a one-use ticket; the TCP connection presents the
// ticket and so acts with that call's identity. A PS that offers no TCP
// data plane (an older PS, --tcp_data_plane=off, TLS), or whose data port
// cannot be reached while its gRPC port can (a firewall), is served over
// the gRPC Exchange stream instead (ps_stream.h), said once in the log.
//
// Same guarantees as PsStream (ps_call_channel.h). Start may block while it
// connects (at most `connect_timeout`); otherwise it never waits on the PS:
// what the socket does not take at once is sent by the connection's writer
// thread.
//
//   PsTcpChannel c(channels->Get("10.0.0.2:2222"), "10.0.0.2:2222", "ps:1");
//   uint64_t id = c.Start(psframe::Method::kPull, bytes, absl::Seconds(30), done);
//
// Thread-safe.
#ifndef PSRT_COMMON_TRANSPORT_PS_TCP_CHANNEL_H_
#define PSRT_COMMON_TRANSPORT_PS_TCP_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_pool.h"
#include "common/transport/pending_calls.h"
#include "common/transport/ps_call_channel.h"
#include "common/transport/ps_stream.h"
#include "grpcpp/grpcpp.h"

namespace psrt {

struct PsTcpChannelOptions {
  // The most Start waits to open a connection (OpenDataPlane, connect,
  // hello) before its call fails.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Until the PS has first answered: after a failed OpenDataPlane
  // (UNAVAILABLE), how long one more try waits for gRPC to reconnect
  // (within connect_timeout) before the call fails with the first status. A
  // lost connection attempt to a serving PS is ridden over; a PS not up yet
  // costs at most this much more. Once it has answered, failures are fast.
  absl::Duration reconnect_wait = absl::Seconds(1);
  // Answers larger than this fail their call (RESOURCE_EXHAUSTED) unread.
  uint64_t max_response_bytes = uint64_t{2} << 30;
};

class PsTcpChannel : public PsCallChannel {
 public:
  // `channel`: the PS's gRPC channel; `address`: the host:port it was made
  // for (the data port replaces the port); `peer` names the PS in errors.
  PsTcpChannel(std::shared_ptr<grpc::ChannelInterface> channel, std::string address, std::string peer,
               PsTcpChannelOptions options = {});
  // Closes the connection; calls still pending end with UNAVAILABLE.
  ~PsTcpChannel() override;
  PsTcpChannel(const PsTcpChannel&) = delete;
  PsTcpChannel& operator=(const PsTcpChannel&) = delete;

  uint64_t Start(psframe::Method method, const grpc::ByteBuffer& request, absl::Duration timeout,
                 const CallRoute& route, Done done) override;
  // True while calls go over TCP (connecting if there is no connection).
  bool CanRoute() override;
  void Expire(uint64_t id, const absl::Status& status) override;


  class Connection;   // one open TCP connection

 private:
  // The open connection, opening one if there is none (blocking). Null with
  // OK status: use the fallback stream.
  absl::StatusOr<std::shared_ptr<Connection>> Current();
  absl::StatusOr<std::shared_ptr<Connection>> Open(uint64_t id);
  void FallBack(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<grpc::ChannelInterface> channel_;
  const std::string address_;
  const std::string peer_;
  const PsTcpChannelOptions options_;
  const std::shared_ptr<PendingCalls> state_;  // shared with the connections
  const std::shared_ptr<BufferPool> pool_ = BufferPool::Create();
  mutable absl::Mutex connect_mu_;  // one Open at a time; held across it
  mutable absl::Mutex mu_;
  std::shared_ptr<Connection> current_ ABSL_GUARDED_BY(mu_);
  int64_t opened_ ABSL_GUARDED_BY(mu_) = 0;  // connections opened: each one's id
  bool answered_ ABSL_GUARDED_BY(mu_) = false;  // an OpenDataPlane has succeeded
  std::unique_ptr<PsStream> fallback_ ABSL_GUARDED_BY(mu_);  // set once, never reset
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_TCP_CHANNEL_H_
