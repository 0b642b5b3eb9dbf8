// Protobuf wire format written and read by hand for the push/pull hot path.
//
// Writer produces exactly the bytes of the messages in proto/ (any protobuf
// parser reads them), but a tensor's content is never copied: its buffer is
// handed to gRPC as a slice that holds a reference until gRPC is done with
// it. Reader walks a received grpc::ByteBuffer slice by slice and copies a
// tensor's content once, straight into fresh 64-byte-aligned storage. So a
// push of N tensor bytes costs N bytes copied by us, on the receiving side
// only (counted by TensorBytesCopied() for tests and benchmarks).
//
//   wire::Writer w;
//   w.Varint(kStepField, step);
//   w.NamedTensor(kGradientField, "dense/kernel", grad);
//   grpc::ByteBuffer buf = w.Finish();
//
//   wire::Reader r(buf);
//   uint32_t field; int type;
//   while (r.Next(&field, &type)) {
//     if (field == kGradientField) { auto nt = r.ReadNamedTensor(); ... }
//     else r.Skip(type);
//   }
//   RETURN_IF_ERROR(r.status());
//
// Neither class is thread-safe; each message gets its own.
#ifndef PSRT_COMMON_TENSOR_WIRE_H_
#define PSRT_COMMON_TENSOR_WIRE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace psrt {
namespace wire {

enum WireType : int {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kFixed32 = 5,
};

// Bytes of tensor content copied by Reader in this process so far.
uint64_t TensorBytesCopied();
// Bytes of tensor content Reader referenced where it lay (set_adopt_aligned).
uint64_t TensorBytesAdopted();

size_t VarintSize(uint64_t v);
// Size of the body of a TensorProto / NamedTensor message (no tag, no length).
size_t TensorProtoSize(const Tensor& t);
size_t NamedTensorSize(absl::string_view name, const Tensor& t);
// Size of a field holding a nested message of `body` bytes, tag included.
size_t MessageFieldSize(uint32_t field, size_t body);

class Writer {
 public:
  void Varint(uint32_t field, uint64_t v);
  void Fixed64(uint32_t field, uint64_t v);
  // Copies `s` (meant for names and other small fields).
  void String(uint32_t field, absl::string_view s);
  // A nested message header; the caller then writes exactly `body` bytes.
  void Message(uint32_t field, size_t body);
  // A TensorProto sub-message; the content is not copied.
  void Tensor(uint32_t field, const psrt::Tensor& t);
  // A NamedTensor sub-message; the content is not copied.
  void NamedTensor(uint32_t field, absl::string_view name, const psrt::Tensor& t);

  size_t size() const { return size_; }
  // The message so far; the writer is empty afterwards.
  grpc::ByteBuffer Finish();

 private:
  void RawVarint(uint64_t v);
  void Tag(uint32_t field, WireType type) { RawVarint((uint64_t{field} << 3) | type); }
  void FlushPending();
  void TensorBody(const psrt::Tensor& t);

  std::vector<grpc::Slice> slices_;
  std::string pending_;  // small header bytes not yet in a slice
  size_t size_ = 0;
};

class Reader {
 public:
  using Allocator = std::function<std::shared_ptr<TensorBuffer>(size_t)>;

  // Takes references to the buffer's slices; no bytes are copied.
  explicit Reader(const grpc::ByteBuffer& buffer);
  explicit Reader(std::vector<grpc::Slice> slices);

  // Where tensor storage comes from (default TensorBuffer::Allocate).
  void set_allocator(Allocator a) { allocator_ = std::move(a); }
  // With true, a tensor's content of kAdoptMinBytes or more that lies in
  // one slice at a 64-byte-aligned address is not copied: the tensor
  // references it (holding the slice). For buffers whose slices nobody
  // writes to afterwards (received messages); the TCP data plane aligns its
  // frames' tensors so (transport/tcp_frame.h). Off by default.
  void set_adopt_aligned(bool adopt) { adopt_aligned_ = adopt; }
  static constexpr size_t kAdoptMinBytes = 16 << 10;

  // The next field of the current message. False at its end or on error;
  // then status() says which.
  bool Next(uint32_t* field, int* wire_type);
  bool ReadVarint(uint64_t* v);
  bool ReadFixed64(uint64_t* v);
  bool ReadString(std::string* s);  // a length-delimited field
  bool Skip(int wire_type);
  // Enter a length-delimited field as a nested message; Next() then stops
  // at its end, and LeaveMessage() returns to the parent.
  bool EnterMessage();
  void LeaveMessage();

  // Reads a length-delimited TensorProto field. Refuses unknown dtypes,
  // negative dims, and content whose size does not match the shape.
  absl::StatusOr<psrt::Tensor> ReadTensor();
  // Reads a length-delimited NamedTensor field.
  absl::StatusOr<std::pair<std::string, psrt::Tensor>> ReadNamedTensor();

  const absl::Status& status() const { return status_; }
  size_t position() const { return pos_; }

 private:
  bool Fail(absl::string_view what);
  bool ReadByte(uint8_t* b);
  bool ReadRaw(void* dst, size_t n);
  bool Advance(size_t n);
  size_t Remaining() const { return limits_.back() - pos_; }

  std::vector<grpc::Slice> slices_;
  size_t slice_ = 0;         // current slice
  size_t slice_offset_ = 0;  // offset inside it
  size_t pos_ = 0;           // offset in the whole message
  std::vector<size_t> limits_;  // end of each enclosing message
  // The current position's bytes as a tensor buffer, when set_adopt_aligned
  // allows it for `n` bytes there; null otherwise.
  std::shared_ptr<TensorBuffer> Adopt(size_t n);

  absl::Status status_;
  Allocator allocator_;
  bool adopt_aligned_ = false;
};

// Parse-side helper: the whole buffer as one string (copies; tests and
// control plane only).
std::string ToString(const grpc::ByteBuffer& buffer);

}  // namespace wire
}  // namespace psrt

#endif  // PSRT_COMMON_TENSOR_WIRE_H_
