#include "common/transport/tcp_frame.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace tcpframe {
namespace {

// Padding comes from here (at most kAlignment - 1 bytes a run).
const uint8_t kZeros[kAlignment] = {};

void Put16(std::string* s, uint16_t v) {
  for (int i = 0; i < 2; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void Put32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void Put64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

constexpr uint8_t kVersion = 1;
constexpr uint8_t kResponseBit = 0x80;

void ReleaseBody(void* holder) { delete static_cast<std::shared_ptr<TensorBuffer>*>(holder); }

}  // namespace

std::unique_ptr<OutFrame> Encode(const Header& h, const std::string& message, const grpc::ByteBuffer& payload) {
  auto f = std::make_unique<OutFrame>();
  if (payload.Valid()) (void)payload.Dump(&f->slices_);
  // One pad entry per large slice (some may pad 0 bytes), so the table's
  // size, and with it every offset, is known before the offsets are.
  size_t large = 0;
  for (const grpc::Slice& s : f->slices_) large += s.size() >= kAlignMinBytes ? 1 : 0;
  large = std::min<size_t>(large, std::numeric_limits<uint16_t>::max());
  std::string& head = f->head_;
  head.reserve(kPrefixBytes + kHeaderBytes + large * kPadEntryBytes + message.size());
  Put64(&head, 0);  // the body's length, set below
  head.push_back(static_cast<char>(kVersion));
  head.push_back(static_cast<char>(h.response ? kResponseBit | static_cast<uint8_t>(h.code)
                                              : static_cast<uint8_t>(h.method)));
  Put16(&head, static_cast<uint16_t>(large));
  Put32(&head, h.response ? static_cast<uint32_t>(message.size()) : h.timeout_ms);
  Put64(&head, h.call_id);
  Put32(&head, static_cast<uint32_t>(h.response ? -1 : h.store));
  Put32(&head, !h.response && h.replica ? 1 : 0);
  Put64(&head, static_cast<uint64_t>(h.response ? 0 : h.epoch));
  // Offsets are in the body (after the prefix).
  uint64_t offset = kHeaderBytes + large * kPadEntryBytes + message.size();
  std::vector<std::pair<size_t, size_t>> pads;  // (slice index, pad bytes)
  size_t entries = 0;
  for (size_t i = 0; i < f->slices_.size(); ++i) {
    const size_t n = f->slices_[i].size();
    // (Offsets are u32: a body past 4 GiB keeps its later slices unaligned.)
    if (n >= kAlignMinBytes && entries < large && offset + kAlignment <= std::numeric_limits<uint32_t>::max()) {
      const size_t pad = (kAlignment - offset % kAlignment) % kAlignment;
      Put32(&head, static_cast<uint32_t>(offset));
      Put32(&head, static_cast<uint32_t>(pad));
      pads.push_back({i, pad});
      ++entries;
      offset += pad;
    }
    offset += n;
  }
  for (; entries < large; ++entries) {  // entries the 4 GiB limit left unused: empty runs at the end
    Put32(&head, static_cast<uint32_t>(std::min<uint64_t>(offset, std::numeric_limits<uint32_t>::max())));
    Put32(&head, 0);
  }
  head.append(message);
  const uint64_t body = offset;
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>(body >> (8 * i));
  f->bytes_ = kPrefixBytes + body;
  f->iov_.reserve(1 + 2 * f->slices_.size());
  f->iov_.push_back({head.data(), head.size()});
  size_t next_pad = 0;
  for (size_t i = 0; i < f->slices_.size(); ++i) {
    if (next_pad < pads.size() && pads[next_pad].first == i) {
      if (pads[next_pad].second > 0) {
        f->iov_.push_back({const_cast<uint8_t*>(kZeros), pads[next_pad].second});
      }
      ++next_pad;
    }
    if (f->slices_[i].size() > 0) {
      f->iov_.push_back({const_cast<uint8_t*>(f->slices_[i].begin()), f->slices_[i].size()});
    }
  }
  return f;
}

uint64_t DecodePrefix(const uint8_t prefix[kPrefixBytes]) { return Get64(prefix); }

absl::StatusOr<Header> DecodeHeader(const uint8_t* body, size_t body_bytes, bool response) {
  if (body_bytes < kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", body_bytes, " bytes is shorter than its ", kHeaderBytes, "-byte header"));
  }
  if (body[0] != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("frame version ", static_cast<int>(body[0]), ", want 1"));
  }
  Header h;
  h.response = response;
  const uint8_t kind = body[1];
  if (response) {
    if ((kind & kResponseBit) == 0 || (kind & ~kResponseBit) > 16) {
      return absl::InvalidArgumentError(absl::StrCat("response frame of kind ", static_cast<int>(kind)));
    }
    h.code = static_cast<grpc::StatusCode>(kind & ~kResponseBit);
  } else {
    if (kind < 1 || kind > 4) {
      return absl::InvalidArgumentError(absl::StrCat("request frame of unknown method ", static_cast<int>(kind)));
    }
    h.method = static_cast<psframe::Method>(kind);
    h.timeout_ms = Get32(body + 4);
    if (h.timeout_ms == 0) return absl::InvalidArgumentError("request frame with a timeout of 0 ms");
  }
  h.call_id = Get64(body + 8);
  if (!response) {
    h.store = static_cast<int32_t>(Get32(body + 16));
    const uint32_t flags = Get32(body + 20);
    if (flags > 1) return absl::InvalidArgumentError(absl::StrCat("request frame with flags ", flags));
    h.replica = flags == 1;
    h.epoch = static_cast<int64_t>(Get64(body + 24));
  }
  return h;
}

absl::Status DecodeBody(const std::shared_ptr<TensorBuffer>& body, bool response, Header* h, std::string* message,
                        grpc::ByteBuffer* payload) {
  const uint8_t* b = static_cast<const uint8_t*>(body->data());
  const size_t n = body->size();
  absl::StatusOr<Header> header = DecodeHeader(b, n, response);
  if (!header.ok()) return header.status();
  const size_t pads = Get16(b + 2);
  const uint64_t message_bytes = response ? Get32(b + 4) : 0;
  const uint64_t table_end = kHeaderBytes + pads * kPadEntryBytes;
  if (table_end > n || message_bytes > n - table_end) {
    return absl::InvalidArgumentError(absl::StrCat("frame of ", n, " bytes cannot hold its ", pads,
                                                   " pad entries and ", message_bytes, " message bytes"));
  }
  uint64_t at = table_end + message_bytes;  // the payload starts here
  // Runs of payload between the pads.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (size_t i = 0; i < pads; ++i) {
    const uint64_t offset = Get32(b + kHeaderBytes + i * kPadEntryBytes);
    const uint64_t bytes = Get32(b + kHeaderBytes + i * kPadEntryBytes + 4);
    if (offset < at || offset > n || bytes > n - offset || bytes >= kAlignment) {
      return absl::InvalidArgumentError(absl::StrCat("pad entry ", i, " (", bytes, " bytes at ", offset,
                                                     ") is out of order or outside the ", n, "-byte frame"));
    }
    if (offset > at) runs.push_back({at, offset});
    at = offset + bytes;
  }
  if (at < n) runs.push_back({at, n});
  *h = *header;
  message->assign(reinterpret_cast<const char*>(b) + table_end, message_bytes);
  if (runs.empty()) {
    *payload = grpc::ByteBuffer();
    return absl::OkStatus();
  }
  // One slice over the body, holding it; the runs are its sub-slices.
  grpc::Slice whole(body->data(), n, &ReleaseBody, new std::shared_ptr<TensorBuffer>(body));
  std::vector<grpc::Slice> slices;
  slices.reserve(runs.size());
  for (const auto& [begin, end] : runs) slices.push_back(whole.sub(begin, end));
  *payload = grpc::ByteBuffer(slices.data(), slices.size());
  return absl::OkStatus();
}

std::string EncodeHello(const std::string& ticket) {
  std::string s(kMagic, kMagicBytes);
  s.append(ticket);
  s.resize(kHelloBytes, '\0');
  return s;
}

absl::StatusOr<std::string> DecodeHello(const uint8_t hello[kHelloBytes]) {
  if (std::memcmp(hello, kMagic, kMagicBytes) != 0) {
    return absl::InvalidArgumentError("not a psrt data-plane hello (bad magic)");
  }
  return std::string(reinterpret_cast<const char*>(hello) + kMagicBytes, kTicketBytes);
}

std::string EncodeVerdict(const grpc::Status& status) {
  std::string message = status.error_message().substr(0, kMaxVerdictMessageBytes);
  std::string s(kMagic, kMagicBytes);
  s.push_back(static_cast<char>(status.error_code()));
  s.push_back(0);
  Put16(&s, 0);
  Put32(&s, static_cast<uint32_t>(message.size()));
  s.append(message);
  return s;
}

absl::Status DecodeVerdictHeader(const uint8_t header[kVerdictHeaderBytes], grpc::StatusCode* code,
                                 uint32_t* message_bytes) {
  if (std::memcmp(header, kMagic, kMagicBytes) != 0) {
    return absl::InvalidArgumentError("the PS's data port did not answer as a psrt data plane (bad magic)");
  }
  const uint8_t c = header[kMagicBytes];
  if (c > 16) return absl::InvalidArgumentError(absl::StrCat("data-plane verdict with code ", static_cast<int>(c)));
  *code = static_cast<grpc::StatusCode>(c);
  *message_bytes = Get32(header + kMagicBytes + 4);
  if (*message_bytes > kMaxVerdictMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("data-plane verdict message of ", *message_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace tcpframe
}  // namespace psrt
