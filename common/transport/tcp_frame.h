// Frames of the PS data plane over TCP: the same four calls as the
// Exchange stream (ps_frame.h), with the same ps_wire payload bytes, on a
// plain TCP connection per (worker, PS) instead of an HTTP/2 stream. What
// TCP gives up (gRPC's framing, flow control and completion queues) is
// what ps_bench measured as most of a small call's cost.
//
// A frame is an 8-byte length and a body the receiver reads into one
// 64-byte-aligned buffer. The sender inserts zero padding so that every
// large payload slice (a tensor's content, kAlignMinBytes and up) starts
// at a 64-byte offset of the body: the receiver's wire::Reader then adopts
// that content where it lies (Reader::set_adopt_aligned) instead of copying
// it, so a tensor crosses with no copy on send and none on receive beyond
// the kernel's. The padding runs are listed in the header, so the payload
// the decoder hands on is exactly the ps_wire bytes that were sent.
//
//   u64 body_bytes
//   body:
//     u8  version = 1
//     u8  kind        request: the method (psframe::Method, 1-4)
//                     response: 0x80 | grpc status code (0-16)
//     u16 pads        padding runs listed below
//     u32 word        request: the call's timeout in ms (1 and up)
//                     response: bytes of the status message
//     u64 call_id
//     i32 store       request of a replicated job: the store it is for; else -1
//     u32 flags       bit 0: a primary's forward of a push to its backup
//     i64 epoch       ...and the placement epoch it routes by (1 and up); else 0
//                     (what a gRPC call carries as psrt-store/psrt-epoch/psrt-replica
//                     metadata)
//     pads x { u32 offset, u32 bytes }   in the body; increasing, disjoint,
//                                        after the message (responses)
//     message         responses only
//     payload, with the padding runs inserted
//
// Little-endian. Every field is checked on decode, before anything is
// built from it.
//
// The connection opens with a fixed-size hello carrying a ticket that the
// PS issued over its authenticated gRPC service (OpenDataPlane), so the TCP
// connection has the caller identity and roles of that gRPC call:
//
//   client -> PS:  "PSRTDP01" | 32-byte ticket
//   PS -> client:  "PSRTDP01" | u8 grpc code | u8 0 | u16 0 | u32 message bytes (<= 1024) | message
#ifndef PSRT_COMMON_TRANSPORT_TCP_FRAME_H_
#define PSRT_COMMON_TRANSPORT_TCP_FRAME_H_

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "common/transport/ps_frame.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/status.h"

namespace psrt {
namespace tcpframe {

inline constexpr size_t kPrefixBytes = 8;
inline constexpr size_t kHeaderBytes = 32;
inline constexpr size_t kPadEntryBytes = 8;
// Payload slices this large and up start 64-byte aligned in the body.
inline constexpr size_t kAlignMinBytes = 16 << 10;
inline constexpr size_t kAlignment = 64;
inline constexpr size_t kTicketBytes = 32;
inline constexpr char kMagic[] = "PSRTDP01";  // 8 bytes, no terminator on the wire
inline constexpr size_t kMagicBytes = 8;
inline constexpr size_t kHelloBytes = kMagicBytes + kTicketBytes;
inline constexpr size_t kVerdictHeaderBytes = kMagicBytes + 8;
inline constexpr size_t kMaxVerdictMessageBytes = 1024;

struct Header {
  bool response = false;
  psframe::Method method = psframe::Method::kPull;  // requests
  uint32_t timeout_ms = 0;                            // requests
  grpc::StatusCode code = grpc::StatusCode::OK;      // responses
  uint64_t call_id = 0;
  // Requests of a replicated job: store and epoch (-1 and 0: none). Carried
  // as sent; the PS checks them as it checks the gRPC metadata.
  int32_t store = -1;
  int64_t epoch = 0;
  bool replica = false;
};

// A frame ready to send: its own header bytes and references to the
// payload's slices (nothing copied). The iovecs point into it; it must stay
// where it is (not be moved) while they are used.
class OutFrame {
 public:
  OutFrame() = default;
  OutFrame(const OutFrame&) = delete;
  OutFrame& operator=(const OutFrame&) = delete;

  size_t bytes() const { return bytes_; }
  const std::vector<iovec>& iov() const { return iov_; }
  // Keeps `hold` alive as long as the frame: until it is written or
  // dropped (a server's call slots, released when its answer is out).
  void Hold(std::shared_ptr<void> hold) { hold_ = std::move(hold); }

 private:
  friend std::unique_ptr<OutFrame> Encode(const Header&, const std::string&, const grpc::ByteBuffer&);
  std::string head_;                 // prefix, header, pad table, message
  std::vector<grpc::Slice> slices_;  // the payload's, referenced
  std::vector<iovec> iov_;
  size_t bytes_ = 0;
  std::shared_ptr<void> hold_;
};

// A request (message empty) or a response frame around `payload`.
std::unique_ptr<OutFrame> Encode(const Header& h, const std::string& message, const grpc::ByteBuffer& payload);

// The body length of a frame from its 8-byte prefix.
uint64_t DecodePrefix(const uint8_t prefix[kPrefixBytes]);

// The fixed 32-byte header at the start of a body (at least kHeaderBytes);
// INVALID_ARGUMENT naming the field for a bad version or kind.
absl::StatusOr<Header> DecodeHeader(const uint8_t* body, size_t body_bytes, bool response);

// A whole body, read into `body` (its bytes are exactly the body): the
// header, the status message (responses) and the payload as slices that
// reference `body` (no copy; they hold it alive). INVALID_ARGUMENT naming
// what is wrong for a malformed pad table or lengths.
absl::Status DecodeBody(const std::shared_ptr<TensorBuffer>& body, bool response, Header* h, std::string* message,
                        grpc::ByteBuffer* payload);

// The hello a client sends with `ticket` (kTicketBytes).
std::string EncodeHello(const std::string& ticket);
// The ticket in a hello; INVALID_ARGUMENT when it is not one.
absl::StatusOr<std::string> DecodeHello(const uint8_t hello[kHelloBytes]);
// The PS's answer to a hello.
std::string EncodeVerdict(const grpc::Status& status);
// The code and message length of a verdict's fixed part; INVALID_ARGUMENT
// when it is not one (or the message is over kMaxVerdictMessageBytes).
absl::Status DecodeVerdictHeader(const uint8_t header[kVerdictHeaderBytes], grpc::StatusCode* code,
                                 uint32_t* message_bytes);

}  // namespace tcpframe
}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_TCP_FRAME_H_
