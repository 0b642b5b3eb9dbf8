// PsCallChannel: how a PsClient sends the data-path calls (Pull, PullRows,
// Push, PushRows, as ps_wire bytes) to one PS when not as unary gRPC calls:
// frames of one long-lived gRPC stream (ps_stream.h) or of one TCP
// connection (ps_tcp_channel.h). Both keep the unary calls' guarantees: the
// same request bytes (so the push's request id and exactly-once
// application on the PS), a call that times out is the caller's to Expire
// (the retry with the same id is deduplicated), and a connection that
// breaks fails every call on it with UNAVAILABLE and is reopened by the
// next call.
//
//   uint64_t id = channel->Start(psframe::Method::kPush, bytes, absl::Seconds(30), done);
//   ... channel->Expire(id, absl::DeadlineExceededError(...));  // done runs once, here or on answer
//
// Thread-safe.
#ifndef PSRT_COMMON_TRANSPORT_PS_CALL_CHANNEL_H_
#define PSRT_COMMON_TRANSPORT_PS_CALL_CHANNEL_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/transport/ps_frame.h"
#include "grpcpp/support/byte_buffer.h"

namespace psrt {

// The store and placement epoch a call of a replicated job names
// (job.replication; what a unary call carries as psrt-store/psrt-epoch).
struct CallRoute {
  int store = -1;  // -1: none (a job without replicas)
  int64_t epoch = 0;
  bool replica = false;  // a primary's forward of a push to its backup
  bool present() const { return store >= 0; }
};

class PsCallChannel {
 public:
  using Done = std::function<void(absl::StatusOr<grpc::ByteBuffer>)>;
  virtual ~PsCallChannel() = default;

  // Sends one call; `done` runs exactly once, on any thread (possibly
  // before Start returns). Returns the call's id for Expire. A call with a
  // route goes only to a channel that CanRoute (else it fails UNAVAILABLE).
  virtual uint64_t Start(psframe::Method method, const grpc::ByteBuffer& request, absl::Duration timeout,
                         const CallRoute& route, Done done) = 0;
  // Whether calls with a route can go now (may open the connection to find
  // out, so it may block as Start may).
  virtual bool CanRoute() = 0;
  // Ends call `id` with `status` unless it has ended already.
  virtual void Expire(uint64_t id, const absl::Status& status) = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_CALL_CHANNEL_H_
