#include "common/transport/ps_frame.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace psframe {
namespace {

constexpr uint8_t kVersion = 1;
constexpr size_t kRequestHeader = 14;
constexpr size_t kResponseHeader = 16;
constexpr uint32_t kMaxMessage = 64 << 10;  // status text longer than this is cut

void Put32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void Put64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t Get32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t Get64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// A frame's slices: the first `n` bytes copied into `head` (they may span
// slices), the rest appended to `rest` as sub-slices (no copy).
bool Split(const grpc::ByteBuffer& frame, size_t n, std::string* head, std::vector<grpc::Slice>* rest) {
  std::vector<grpc::Slice> slices;
  if (!frame.Dump(&slices).ok()) return false;
  head->clear();
  for (grpc::Slice& s : slices) {
    if (head->size() < n) {
      const size_t take = std::min(n - head->size(), s.size());
      head->append(reinterpret_cast<const char*>(s.begin()), take);
      if (take < s.size()) rest->push_back(s.sub(take, s.size()));
    } else {
      rest->push_back(std::move(s));
    }
  }
  return head->size() == n;
}

grpc::ByteBuffer Join(std::string head, const grpc::ByteBuffer& payload) {
  std::vector<grpc::Slice> slices;
  slices.emplace_back(head);
  std::vector<grpc::Slice> body;
  if (payload.Valid() && payload.Dump(&body).ok()) {
    for (grpc::Slice& s : body) slices.push_back(std::move(s));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer FromSlices(std::vector<grpc::Slice>* slices) {
  if (slices->empty()) {
    grpc::Slice empty;
    return grpc::ByteBuffer(&empty, 1);
  }
  return grpc::ByteBuffer(slices->data(), slices->size());
}

}  // namespace

const char* MethodName(Method m) {
  switch (m) {
    case Method::kPull: return "Pull";
    case Method::kPullRows: return "PullRows";
    case Method::kPush: return "Push";
    case Method::kPushRows: return "PushRows";
  }
  return "?";
}

bool MethodFromPath(const std::string& path, Method* m) {
  for (Method c : {Method::kPull, Method::kPullRows, Method::kPush, Method::kPushRows}) {
    if (path == absl::StrCat("/psrt.ParameterServer/", MethodName(c))) {
      *m = c;
      return true;
    }
  }
  return false;
}

grpc::ByteBuffer EncodeRequest(const RequestHeader& h, const grpc::ByteBuffer& payload) {
  std::string head(kRequestHeader, '\0');
  head[0] = static_cast<char>(kVersion);
  head[1] = static_cast<char>(h.method);
  Put32(&head[2], h.timeout_ms);
  Put64(&head[6], h.call_id);
  return Join(std::move(head), payload);
}

absl::StatusOr<RequestHeader> DecodeRequest(const grpc::ByteBuffer& frame, grpc::ByteBuffer* payload) {
  std::string head;
  std::vector<grpc::Slice> rest;
  if (!Split(frame, kRequestHeader, &head, &rest)) {
    return absl::InvalidArgumentError(absl::StrCat("Exchange frame of ", frame.Length(), " bytes is shorter than its ",
                                                   kRequestHeader, "-byte header"));
  }
  const auto* p = reinterpret_cast<const unsigned char*>(head.data());
  if (p[0] != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("Exchange frame version ", int{p[0]}, " (this PS speaks ", int{kVersion}, ")"));
  }
  if (p[1] < 1 || p[1] > 4) {
    return absl::InvalidArgumentError(absl::StrCat("Exchange frame method ", int{p[1]}, " is not 1-4 (Pull, PullRows, Push, PushRows)"));
  }
  RequestHeader h;
  h.method = static_cast<Method>(p[1]);
  h.timeout_ms = Get32(p + 2);
  h.call_id = Get64(p + 6);
  *payload = FromSlices(&rest);
  return h;
}

grpc::ByteBuffer EncodeResponse(uint64_t call_id, const grpc::Status& status, const grpc::ByteBuffer& payload) {
  std::string message = status.error_message().substr(0, kMaxMessage);
  std::string head(kResponseHeader, '\0');
  head[0] = static_cast<char>(kVersion);
  head[1] = static_cast<char>(status.error_code());
  Put32(&head[4], static_cast<uint32_t>(message.size()));
  Put64(&head[8], call_id);
  head += message;
  return Join(std::move(head), status.ok() ? payload : grpc::ByteBuffer());
}

absl::Status DecodeResponse(const grpc::ByteBuffer& frame, uint64_t* call_id, grpc::Status* status,
                            grpc::ByteBuffer* payload) {
  std::string head;
  std::vector<grpc::Slice> rest;
  if (!Split(frame, kResponseHeader, &head, &rest)) {
    return absl::InvalidArgumentError(absl::StrCat("Exchange answer of ", frame.Length(), " bytes is shorter than its header"));
  }
  const auto* p = reinterpret_cast<const unsigned char*>(head.data());
  if (p[0] != kVersion) return absl::InvalidArgumentError(absl::StrCat("Exchange answer version ", int{p[0]}));
  const uint8_t code = p[1];
  if (code > 16) return absl::InvalidArgumentError(absl::StrCat("Exchange answer status code ", int{code}));
  const uint32_t message_bytes = Get32(p + 4);
  if (message_bytes > kMaxMessage) {
    return absl::InvalidArgumentError(absl::StrCat("Exchange answer message of ", message_bytes, " bytes"));
  }
  *call_id = Get64(p + 8);
  // The message, then the payload, from the remaining slices.
  grpc::ByteBuffer tail = FromSlices(&rest);
  std::string message;
  std::vector<grpc::Slice> body;
  if (!Split(tail, message_bytes, &message, &body)) {
    return absl::InvalidArgumentError(absl::StrCat("Exchange answer says ", message_bytes,
                                                   " bytes of message but has fewer"));
  }
  *status = grpc::Status(static_cast<grpc::StatusCode>(code), message);
  *payload = FromSlices(&body);
  return absl::OkStatus();
}

}  // namespace psframe
}  // namespace psrt
