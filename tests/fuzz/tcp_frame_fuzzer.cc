// Fuzzes the PS data plane over TCP (common/transport/tcp_frame.h): the
// frame reader a PS runs on every byte a connection sends it, and a worker
// on every answer, then the body decoder and the ps_wire decoders with
// adoption on (tensors referenced where the frame put them).
//
// The input's first byte says whether the stream is read as requests (the
// PS's side) or as answers (the worker's); the rest is the byte stream
// itself, sent through a real socket pair and read frame by frame until it
// ends or a frame is refused.
//
// Invariants: an accepted body re-encodes to a body that reads back to the
// same header, message and payload bytes; everything else is refused with
// a status (an oversized frame is skipped and reported with its header),
// never a crash, a hang or a read past the stream.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "common/net/socket.h"
#include "common/tensor_wire.h"
#include "common/transport/ps_wire.h"
#include "common/transport/tcp_frame.h"
#include "common/transport/tcp_frame_io.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;
namespace tcpframe = psrt::tcpframe;
namespace pswire = psrt::pswire;

namespace {

constexpr uint64_t kMaxBody = 1 << 20;

std::string Flatten(const tcpframe::OutFrame& f) {
  std::string s;
  for (const iovec& v : f.iov()) s.append(static_cast<const char*>(v.iov_base), v.iov_len);
  return s;
}

void DecodePayload(const tcpframe::Header& h, const grpc::ByteBuffer& payload) {
  if (h.response) {
    (void)pswire::DecodePullResult(payload, nullptr, /*adopt_aligned=*/true);
    (void)pswire::DecodePushResult(payload);
    return;
  }
  switch (h.method) {
    case psrt::psframe::Method::kPull: (void)pswire::DecodePull(payload); break;
    case psrt::psframe::Method::kPullRows: (void)pswire::DecodePullRows(payload); break;
    case psrt::psframe::Method::kPush: (void)pswire::DecodePush(payload, nullptr, /*adopt_aligned=*/true); break;
    case psrt::psframe::Method::kPushRows: (void)pswire::DecodePushRows(payload); break;
  }
}

void CheckBody(const std::shared_ptr<psrt::TensorBuffer>& body, bool response) {
  tcpframe::Header h;
  std::string message;
  grpc::ByteBuffer payload;
  if (!tcpframe::DecodeBody(body, response, &h, &message, &payload).ok()) return;
  Check(h.response == response, "decoded the other kind of frame");
  if (!response) Check(h.timeout_ms > 0, "accepted a request with no timeout");
  DecodePayload(h, payload);
  // Re-encoded (its own padding), it reads back the same.
  const std::string again = Flatten(*tcpframe::Encode(h, message, payload));
  Check(again.size() >= tcpframe::kPrefixBytes, "re-encoded frame has no prefix");
  Check(tcpframe::DecodePrefix(reinterpret_cast<const uint8_t*>(again.data())) ==
            again.size() - tcpframe::kPrefixBytes,
        "re-encoded frame's prefix is not its length");
  auto b2 = psrt::TensorBuffer::Allocate(again.size() - tcpframe::kPrefixBytes);
  std::memcpy(b2->data(), again.data() + tcpframe::kPrefixBytes, b2->size());
  tcpframe::Header h2;
  std::string message2;
  grpc::ByteBuffer payload2;
  Check(tcpframe::DecodeBody(b2, response, &h2, &message2, &payload2).ok(), "re-encoded body does not read back");
  Check(h2.call_id == h.call_id && h2.method == h.method && h2.code == h.code && h2.timeout_ms == h.timeout_ms,
        "re-encoded header differs");
  Check(message2 == message, "re-encoded message differs");
  Check(psrt::wire::ToString(payload2) == psrt::wire::ToString(payload), "re-encoded payload differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool response = (data[0] & 1) != 0;
  ++data;
  --size;
  size = std::min<size_t>(size, 64 << 10);  // fits the socket pair's buffer: written before it is read
  int sv[2];
  Check(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  psrt::net::Fd writer(sv[0]), reader_fd(sv[1]);
  int big = 256 << 10;
  ::setsockopt(writer.get(), SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = ::write(writer.get(), data + sent, size - sent);
    Check(n > 0, "socket pair write");
    sent += static_cast<size_t>(n);
  }
  writer.Reset();  // the stream ends here: the reader must see it, not hang
  // A budget under the limit: large bodies are charged, or refused at once,
  // and every charge must come back.
  auto budget = std::make_shared<tcpframe::ByteBudget>(kMaxBody / 2);
  tcpframe::FrameReader reader(reader_fd.get(), psrt::BufferPool::Create(), kMaxBody, "fuzz", budget);
  for (int frames = 0; frames < 1000; ++frames) {
    std::shared_ptr<psrt::TensorBuffer> body;
    absl::StatusOr<tcpframe::Header> oversized = absl::UnknownError("");
    absl::Status s = reader.Next(&body, &oversized, response);
    if (s.code() == absl::StatusCode::kResourceExhausted) continue;  // skipped; the stream goes on
    if (!s.ok()) break;
    Check(body != nullptr && body->size() <= kMaxBody, "accepted a body over the limit");
    CheckBody(body, response);
  }
  Check(budget->held() == 0, "a body's charge to the budget was not given back");
  return 0;
}
