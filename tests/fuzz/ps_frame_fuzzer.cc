// Fuzzes the frame reader of ParameterServer/Exchange (common/transport/
// ps_frame.h), the first code a PS runs on every streamed push and pull and
// a worker on every answer. The input's first byte picks where the frame is
// cut into slices (gRPC hands messages over in slices and the header may
// straddle them); the rest is read as a request frame and as an answer.
//
// Invariants: whatever is accepted re-encodes to bytes that read back the
// same; everything else is refused with a status, never a crash.
#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor_wire.h"
#include "common/transport/ps_frame.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;
namespace psframe = psrt::psframe;

namespace {

grpc::ByteBuffer SliceUp(const uint8_t* data, size_t size) {
  uint8_t cuts = size > 0 ? data[0] : 0;
  if (size > 0) {
    ++data;
    --size;
  }
  std::vector<grpc::Slice> slices;
  size_t pos = 0;
  for (int i = 0; i < 3 && pos < size; ++i) {
    size_t len = std::min<size_t>(((cuts >> (2 * i)) & 3) * 5, size - pos);
    slices.emplace_back(data + pos, len);
    pos += len;
  }
  slices.emplace_back(data + pos, size - pos);
  return grpc::ByteBuffer(slices.data(), slices.size());
}


}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grpc::ByteBuffer frame = SliceUp(data, size);
  grpc::ByteBuffer payload;
  absl::StatusOr<psframe::RequestHeader> h = psframe::DecodeRequest(frame, &payload);
  if (h.ok()) {
    Check(static_cast<int>(h->method) >= 1 && static_cast<int>(h->method) <= 4, "accepted method out of range");
    grpc::ByteBuffer again = psframe::EncodeRequest(*h, payload);
    Check(psrt::wire::ToString(again) == psrt::wire::ToString(frame), "request frame does not re-encode to its bytes");
  }
  uint64_t id = 0;
  grpc::Status status;
  if (psframe::DecodeResponse(frame, &id, &status, &payload).ok()) {
    grpc::ByteBuffer again = psframe::EncodeResponse(id, status, payload);
    uint64_t id2 = 0;
    grpc::Status status2;
    grpc::ByteBuffer payload2;
    Check(psframe::DecodeResponse(again, &id2, &status2, &payload2).ok(), "answer does not read back");
    Check(id2 == id && status2.error_code() == status.error_code() &&
              status2.error_message() == status.error_message(),
          "answer header does not round-trip");
    Check(!status.ok() || psrt::wire::ToString(payload2) == psrt::wire::ToString(payload), "answer payload does not round-trip");
  }
  return 0;
}
