// The server side of ParameterServer/Exchange: one reactor per stream that
// reads request frames (ps_frame.h), serves each through
// PsServiceImpl::ServeData exactly as the unary method would (same
// authorisation, limits and checks, per frame), and writes the answers back
// in the order they complete.
//
// Several frames of one stream are served at once: the next read is issued
// before a frame is served, so a SYNC pull parked in the core does not hold
// up the pushes behind it. A malformed frame ends the stream with
// INVALID_ARGUMENT (the caller's pending calls fail and it reopens); the
// reactor finishes only when every frame it took has been answered, so a
// late answer never touches a finished stream.
//
// A caller that does not read its answers is not read either: once 64
// answers wait to be written, the stream reads no more frames until half
// of them are (frames being served, a parked pull among them, do not
// count). Its writes then stall under HTTP/2 flow control, instead of the
// PS making and keeping an answer, if only a refusal, for every frame it
// sends (issue #28: 44 MB to 981 MB in 30 s of one such flood). Paused so,
// a stream that has no answer written for `write_timeout` is cancelled (its
// frames, answers and their slots let go; the PS logs why, the caller sees
// CANCELLED, since a status could only follow the answers it does not read).
#ifndef PSRT_COMMON_STORE_PS_EXCHANGE_H_
#define PSRT_COMMON_STORE_PS_EXCHANGE_H_

#include <cstdint>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/byte_buffer.h"

namespace psrt {

class PsServiceImpl;

// `write_timeout` <= 0: a paused stream waits for its caller for ever.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewExchangeReactor(PsServiceImpl* service,
                                                                                grpc::CallbackServerContext* ctx,
                                                                                absl::Duration write_timeout);

// Exchange streams of this process not yet done (their reactors' OnDone
// not run), over every service.
int64_t LiveExchangeStreams();

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PS_EXCHANGE_H_
