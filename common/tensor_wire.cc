#include "common/tensor_wire.h"

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace wire {
namespace {

std::atomic<uint64_t> g_tensor_bytes_copied{0};
std::atomic<uint64_t> g_tensor_bytes_adopted{0};

// TensorProto field numbers (proto/tensor.proto).
constexpr uint32_t kDtypeField = 1;
constexpr uint32_t kShapeField = 2;
constexpr uint32_t kContentField = 3;
constexpr uint32_t kDimField = 1;  // TensorShapeProto.dim
// NamedTensor field numbers.
constexpr uint32_t kNameField = 1;
constexpr uint32_t kTensorField = 2;

size_t TagSize(uint32_t field) { return VarintSize(uint64_t{field} << 3); }

size_t PackedDimsSize(const TensorShape& shape) {
  size_t n = 0;
  for (int64_t d : shape.dims()) n += VarintSize(static_cast<uint64_t>(d));
  return n;
}

size_t ShapeBodySize(const TensorShape& shape) {
  if (shape.rank() == 0) return 0;
  size_t packed = PackedDimsSize(shape);
  return TagSize(kDimField) + VarintSize(packed) + packed;
}

void DeleteBufferRef(void* user_data) {
  delete static_cast<std::shared_ptr<TensorBuffer>*>(user_data);
}

}  // namespace

uint64_t TensorBytesCopied() { return g_tensor_bytes_copied.load(std::memory_order_relaxed); }
uint64_t TensorBytesAdopted() { return g_tensor_bytes_adopted.load(std::memory_order_relaxed); }

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

size_t MessageFieldSize(uint32_t field, size_t body) {
  return TagSize(field) + VarintSize(body) + body;
}

size_t TensorProtoSize(const Tensor& t) {
  size_t n = 0;
  if (t.dtype() != DT_INVALID) n += TagSize(kDtypeField) + VarintSize(t.dtype());
  n += MessageFieldSize(kShapeField, ShapeBodySize(t.shape()));
  size_t bytes = t.TotalBytes();
  if (bytes > 0) n += MessageFieldSize(kContentField, bytes);
  return n;
}

size_t NamedTensorSize(absl::string_view name, const Tensor& t) {
  size_t n = 0;
  if (!name.empty()) n += MessageFieldSize(kNameField, name.size());
  return n + MessageFieldSize(kTensorField, TensorProtoSize(t));
}

// ---------------------------------------------------------------- Writer

void Writer::RawVarint(uint64_t v) {
  while (v >= 0x80) {
    pending_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
    ++size_;
  }
  pending_.push_back(static_cast<char>(v));
  ++size_;
}

void Writer::FlushPending() {
  if (pending_.empty()) return;
  slices_.emplace_back(pending_.data(), pending_.size());
  pending_.clear();
}

void Writer::Varint(uint32_t field, uint64_t v) {
  Tag(field, kVarint);
  RawVarint(v);
}

void Writer::Fixed64(uint32_t field, uint64_t v) {
  Tag(field, kFixed64);
  for (int i = 0; i < 8; ++i) pending_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  size_ += 8;
}

void Writer::String(uint32_t field, absl::string_view s) {
  Tag(field, kLengthDelimited);
  RawVarint(s.size());
  pending_.append(s.data(), s.size());
  size_ += s.size();
}

void Writer::Message(uint32_t field, size_t body) {
  Tag(field, kLengthDelimited);
  RawVarint(body);
}

void Writer::TensorBody(const psrt::Tensor& t) {
  if (t.dtype() != DT_INVALID) Varint(kDtypeField, t.dtype());
  Message(kShapeField, ShapeBodySize(t.shape()));
  if (t.shape().rank() > 0) {
    Message(kDimField, PackedDimsSize(t.shape()));
    for (int64_t d : t.shape().dims()) RawVarint(static_cast<uint64_t>(d));
  }
  size_t bytes = t.TotalBytes();
  if (bytes == 0) return;
  Message(kContentField, bytes);
  FlushPending();
  // The slice keeps the tensor's buffer alive until gRPC has sent it.
  auto* ref = new std::shared_ptr<TensorBuffer>(t.buffer());
  slices_.emplace_back(const_cast<void*>(t.raw_data()), bytes, &DeleteBufferRef, ref);
  size_ += bytes;
}

void Writer::Tensor(uint32_t field, const psrt::Tensor& t) {
  Message(field, TensorProtoSize(t));
  TensorBody(t);
}

void Writer::NamedTensor(uint32_t field, absl::string_view name, const psrt::Tensor& t) {
  Message(field, NamedTensorSize(name, t));
  if (!name.empty()) String(kNameField, name);
  Tensor(kTensorField, t);
}

grpc::ByteBuffer Writer::Finish() {
  FlushPending();
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  slices_.clear();
  size_ = 0;
  return buffer;
}

// ---------------------------------------------------------------- Reader

Reader::Reader(const grpc::ByteBuffer& buffer) {
  bool dumped = !buffer.Valid() || buffer.Dump(&slices_).ok();
  size_t total = 0;
  for (const auto& s : slices_) total += s.size();
  limits_.push_back(total);
  if (!dumped) status_ = absl::InvalidArgumentError("unreadable message buffer");
}

Reader::Reader(std::vector<grpc::Slice> slices) : slices_(std::move(slices)) {
  size_t total = 0;
  for (const auto& s : slices_) total += s.size();
  limits_.push_back(total);
}

bool Reader::Fail(absl::string_view what) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("malformed message at byte ", pos_, ": ", what));
  }
  return false;
}

bool Reader::ReadByte(uint8_t* b) {
  if (Remaining() < 1) return Fail("truncated");
  while (slice_offset_ == slices_[slice_].size()) {
    ++slice_;
    slice_offset_ = 0;
  }
  *b = slices_[slice_].begin()[slice_offset_++];
  ++pos_;
  return true;
}

bool Reader::ReadRaw(void* dst, size_t n) {
  if (Remaining() < n) return Fail(absl::StrCat("field of ", n, " bytes is truncated"));
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    size_t avail = slices_[slice_].size() - slice_offset_;
    if (avail == 0) {
      ++slice_;
      slice_offset_ = 0;
      continue;
    }
    size_t k = std::min(avail, n);
    if (out != nullptr) {
      std::memcpy(out, slices_[slice_].begin() + slice_offset_, k);
      out += k;
    }
    slice_offset_ += k;
    pos_ += k;
    n -= k;
  }
  return true;
}

bool Reader::Advance(size_t n) { return ReadRaw(nullptr, n); }

std::shared_ptr<TensorBuffer> Reader::Adopt(size_t n) {
  if (!adopt_aligned_ || n < kAdoptMinBytes || Remaining() < n) return nullptr;
  size_t s = slice_, off = slice_offset_;
  while (s < slices_.size() && off == slices_[s].size()) {  // at a slice's end: the next one
    ++s;
    off = 0;
  }
  if (s == slices_.size() || slices_[s].size() - off < n) return nullptr;
  uint8_t* p = const_cast<uint8_t*>(slices_[s].begin()) + off;
  if (reinterpret_cast<uintptr_t>(p) % 64 != 0) return nullptr;
  // The buffer holds a reference to the slice until the tensor goes.
  return std::make_shared<TensorBuffer>(p, n, [slice = slices_[s]](void*) {});
}

bool Reader::ReadVarint(uint64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b;
    if (!ReadByte(&b)) return false;
    result |= uint64_t{b & 0x7fu} << shift;
    if ((b & 0x80) == 0) {
      *v = result;
      return true;
    }
  }
  return Fail("varint longer than 10 bytes");
}

bool Reader::ReadFixed64(uint64_t* v) {
  uint8_t bytes[8];
  if (!ReadRaw(bytes, 8)) return false;
  *v = 0;
  for (int i = 7; i >= 0; --i) *v = (*v << 8) | bytes[i];
  return true;
}

bool Reader::Next(uint32_t* field, int* wire_type) {
  if (!status_.ok() || pos_ == limits_.back()) return false;
  uint64_t tag;
  if (!ReadVarint(&tag)) return false;
  *field = static_cast<uint32_t>(tag >> 3);
  *wire_type = static_cast<int>(tag & 7);
  if (*field == 0 || (tag >> 3) > 0x1fffffff) return Fail("bad field number");
  return true;
}

bool Reader::ReadString(std::string* s) {
  uint64_t len;
  if (!ReadVarint(&len)) return false;
  if (len > Remaining()) return Fail(absl::StrCat("string of ", len, " bytes is truncated"));
  s->resize(len);
  return ReadRaw(s->data(), len);
}

bool Reader::Skip(int wire_type) {
  uint64_t v;
  switch (wire_type) {
    case kVarint: return ReadVarint(&v);
    case kFixed64: return Advance(8);
    case kFixed32: return Advance(4);
    case kLengthDelimited:
      if (!ReadVarint(&v)) return false;
      if (v > Remaining()) return Fail("length-delimited field is truncated");
      return Advance(v);
    default: return Fail(absl::StrCat("unsupported wire type ", wire_type));
  }
}

bool Reader::EnterMessage() {
  uint64_t len;
  if (!ReadVarint(&len)) return false;
  if (len > Remaining()) return Fail(absl::StrCat("nested message of ", len, " bytes is truncated"));
  limits_.push_back(pos_ + len);
  return true;
}

void Reader::LeaveMessage() {
  if (limits_.size() <= 1) return;
  if (status_.ok() && pos_ < limits_.back()) Advance(limits_.back() - pos_);
  limits_.pop_back();
}

absl::StatusOr<psrt::Tensor> Reader::ReadTensor() {
  if (!EnterMessage()) return status_;
  uint64_t dtype = DT_INVALID;
  TensorShapeProto shape_proto;
  std::shared_ptr<TensorBuffer> content;
  uint64_t content_bytes = 0;
  uint32_t field;
  int type;
  while (Next(&field, &type)) {
    if (field == kDtypeField && type == kVarint) {
      if (!ReadVarint(&dtype)) break;
    } else if (field == kShapeField && type == kLengthDelimited) {
      if (!EnterMessage()) break;
      uint32_t f;
      int t;
      while (Next(&f, &t)) {
        uint64_t d;
        if (f == kDimField && t == kLengthDelimited) {  // packed
          if (!EnterMessage()) break;
          while (Remaining() > 0 && shape_proto.dim_size() <= kMaxRank && ReadVarint(&d)) {
            shape_proto.add_dim(static_cast<int64_t>(d));
          }
          LeaveMessage();
        } else if (f == kDimField && t == kVarint) {
          // Past kMaxRank a dim is read but not kept: FromProto refuses.
          if (ReadVarint(&d) && shape_proto.dim_size() <= kMaxRank) shape_proto.add_dim(static_cast<int64_t>(d));
        } else if (!Skip(t)) {
          break;
        }
      }
      LeaveMessage();
    } else if (field == kContentField && type == kLengthDelimited) {
      if (!ReadVarint(&content_bytes)) break;
      if (content_bytes > Remaining()) {
        Fail(absl::StrCat("tensor content of ", content_bytes, " bytes is truncated"));
        break;
      }
      // Read before the shape is known, since fields may come in any order.
      if ((content = Adopt(content_bytes)) != nullptr) {
        if (!Advance(content_bytes)) break;
        g_tensor_bytes_adopted.fetch_add(content_bytes, std::memory_order_relaxed);
        continue;
      }
      // The one copy: from gRPC's slices into our aligned storage.
      content = allocator_ ? allocator_(content_bytes) : TensorBuffer::Allocate(content_bytes);
      if (!ReadRaw(content->data(), content_bytes)) break;
      g_tensor_bytes_copied.fetch_add(content_bytes, std::memory_order_relaxed);
    } else if (!Skip(type)) {
      break;
    }
  }
  LeaveMessage();
  if (!status_.ok()) return status_;

  DataType dt = static_cast<DataType>(dtype);
  if (dtype > 0xff || DataTypeSize(dt) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor dtype ", DataTypeName(dt), " is not supported"));
  }
  absl::StatusOr<TensorShape> shape = TensorShape::FromProto(shape_proto);
  if (!shape.ok()) return shape.status();
  // Not want == elements * size: that product can wrap to the content's
  // size (0 for int64 [2^61]) and admit a tensor larger than its buffer.
  absl::Status size_ok = CheckContentSize(dt, *shape, content_bytes);
  if (!size_ok.ok()) return size_ok;
  if (content == nullptr) content = TensorBuffer::Allocate(0);
  return psrt::Tensor(dt, *std::move(shape), std::move(content));
}

absl::StatusOr<std::pair<std::string, psrt::Tensor>> Reader::ReadNamedTensor() {
  if (!EnterMessage()) return status_;
  std::pair<std::string, psrt::Tensor> out;
  bool has_tensor = false;
  uint32_t field;
  int type;
  while (Next(&field, &type)) {
    if (field == kNameField && type == kLengthDelimited) {
      if (!ReadString(&out.first)) break;
    } else if (field == kTensorField && type == kLengthDelimited) {
      absl::StatusOr<psrt::Tensor> t = ReadTensor();
      if (!t.ok()) {
        LeaveMessage();
        return absl::Status(t.status().code(),
                            absl::StrCat("tensor '", out.first, "': ", t.status().message()));
      }
      out.second = *std::move(t);
      has_tensor = true;
    } else if (!Skip(type)) {
      break;
    }
  }
  LeaveMessage();
  if (!status_.ok()) return status_;
  if (!has_tensor) {
    return absl::InvalidArgumentError(absl::StrCat("named tensor '", out.first, "' has no tensor"));
  }
  return out;
}

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string s;
  if (!buffer.Valid() || !buffer.Dump(&slices).ok()) return s;
  for (const auto& slice : slices) s.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return s;
}

}  // namespace wire
}  // namespace psrt
