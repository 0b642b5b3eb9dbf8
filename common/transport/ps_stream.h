// PsStream: the worker's end of ParameterServer/Exchange to one PS. Calls
// (Pull, PullRows, Push, PushRows, as ps_wire bytes) travel as frames of
// one long-lived bidirectional stream and are matched to their answers by
// id, so a call costs a message, not a new HTTP/2 stream.
//
// Same guarantees as the unary calls it replaces: the request bytes, and so
// the push's request id and exactly-once application on the PS, are the
// same; a call that times out is DEADLINE_EXCEEDED for the caller (the PS
// may still apply a push, exactly as with a unary deadline, and the retry
// with the same id is deduplicated); a stream that breaks (PS killed,
// connection lost) fails every call on it with UNAVAILABLE, and the next
// call opens a new stream. The channel's TLS and token apply to the stream.
//
//   PsStream s(channel, "ps:0");
//   uint64_t id = s.Start(psframe::Method::kPush, bytes, absl::Seconds(30), done);
//   ... s.Expire(id, absl::DeadlineExceededError(...));  // done runs once, here or on answer
//
// Thread-safe.
#ifndef PSRT_COMMON_TRANSPORT_PS_STREAM_H_
#define PSRT_COMMON_TRANSPORT_PS_STREAM_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transport/pending_calls.h"
#include "common/transport/ps_call_channel.h"
#include "common/transport/ps_frame.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace psrt {

class PsStream : public PsCallChannel {
 public:

  // `peer` names the PS in errors ("ps:1").
  PsStream(std::shared_ptr<grpc::ChannelInterface> channel, std::string peer);
  // Cancels the open stream; calls still pending end with UNAVAILABLE.
  ~PsStream() override;
  PsStream(const PsStream&) = delete;
  PsStream& operator=(const PsStream&) = delete;

  // Sends one call; `done` runs exactly once, on any thread (possibly
  // before Start returns). Returns the call's id for Expire.
  // A route is not carried (the frames have no room for it): such a call
  // fails UNAVAILABLE; CanRoute is false.
  uint64_t Start(psframe::Method method, const grpc::ByteBuffer& request, absl::Duration timeout,
                 const CallRoute& route, Done done) override;
  bool CanRoute() override { return false; }
  // Ends call `id` with `status` unless it has ended already.
  void Expire(uint64_t id, const absl::Status& status) override;

  class Connection;   // one open stream

 private:
  std::shared_ptr<Connection> Current();

  const std::unique_ptr<grpc::GenericStub> stub_;
  const std::string peer_;
  const std::shared_ptr<PendingCalls> state_;  // shared with the streams
  mutable absl::Mutex mu_;
  std::shared_ptr<Connection> current_ ABSL_GUARDED_BY(mu_);
  int64_t opened_ ABSL_GUARDED_BY(mu_) = 0;  // streams opened: each one's id
};

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_STREAM_H_
