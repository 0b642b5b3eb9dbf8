// Frames of the ParameterServer/Exchange stream: one long-lived
// bidirectional gRPC stream per (worker, PS) carries every Push, Pull,
// PullRows and PushRows of that pair, so a call costs one message on an
// open stream instead of a new HTTP/2 stream with its headers, deadline and
// completion (ps_bench measures the difference).
//
// A request frame is a 14-byte header and the same bytes the unary method
// carries (ps_wire.h); a response frame is a 16-byte header, the status
// message, and the unary method's response bytes. Calls are matched by id,
// so answers may come back in any order (a SYNC pull parks while later
// pushes are answered). The payload is never copied: frames are built from
// and split into slices of the same buffers.
//
//   request:  u8 version=1 | u8 method | u32 timeout_ms | u64 call_id | payload
//   response: u8 version=1 | u8 grpc code | u16 0 | u32 message bytes | u64 call_id | message | payload
//
// Little-endian. Every field is checked on decode (version, method, lengths).
#ifndef PSRT_COMMON_TRANSPORT_PS_FRAME_H_
#define PSRT_COMMON_TRANSPORT_PS_FRAME_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace psrt {
namespace psframe {

inline constexpr char kExchangeMethod[] = "/psrt.ParameterServer/Exchange";

enum class Method : uint8_t { kPull = 1, kPullRows = 2, kPush = 3, kPushRows = 4 };
// "Pull", "PullRows", "Push", "PushRows".
const char* MethodName(Method m);
// From a unary method's path ("/psrt.ParameterServer/Push"); false for any other.
bool MethodFromPath(const std::string& path, Method* m);

// A call's timeout as a frame carries it: whole milliseconds, 1 ms to 1 h.
inline uint32_t TimeoutMs(absl::Duration timeout) {
  return static_cast<uint32_t>(std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 1, 3600 * 1000));
}

struct RequestHeader {
  Method method = Method::kPull;
  uint32_t timeout_ms = 0;  // the caller's deadline for this call
  uint64_t call_id = 0;
};

grpc::ByteBuffer EncodeRequest(const RequestHeader& h, const grpc::ByteBuffer& payload);
// INVALID_ARGUMENT naming the field when the frame is short or malformed.
absl::StatusOr<RequestHeader> DecodeRequest(const grpc::ByteBuffer& frame, grpc::ByteBuffer* payload);

grpc::ByteBuffer EncodeResponse(uint64_t call_id, const grpc::Status& status, const grpc::ByteBuffer& payload);
// The call's id, its status and (when OK) its payload; INVALID_ARGUMENT when
// the frame itself is malformed.
absl::Status DecodeResponse(const grpc::ByteBuffer& frame, uint64_t* call_id, grpc::Status* status,
                            grpc::ByteBuffer* payload);

}  // namespace psframe
}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_PS_FRAME_H_
