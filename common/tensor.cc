#include "common/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT: return 4;
    case DT_INT32: return 4;
    case DT_INT64: return 8;
    case DT_DOUBLE: return 8;
    default: return 0;
  }
}

std::string DataTypeName(DataType dtype) {
  switch (dtype) {
    case DT_FLOAT: return "float32";
    case DT_INT32: return "int32";
    case DT_INT64: return "int64";
    case DT_DOUBLE: return "float64";
    case DT_INVALID: return "invalid";
    default: return absl::StrCat("dtype(", static_cast<int>(dtype), ")");
  }
}

absl::StatusOr<TensorShape> TensorShape::FromProto(const TensorShapeProto& proto) {
  if (proto.dim_size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("shape has ", proto.dim_size(), " dims, more than ", kMaxRank));
  }
  std::vector<int64_t> dims(proto.dim().begin(), proto.dim().end());
  int64_t n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape dim ", i, " is negative (", dims[i], ")"));
    }
    if (dims[i] != 0 && n > std::numeric_limits<int64_t>::max() / dims[i]) {
      return absl::InvalidArgumentError("shape's element count overflows int64");
    }
    n *= dims[i];
  }
  return TensorShape(std::move(dims));
}

void TensorShape::ToProto(TensorShapeProto* proto) const {
  proto->clear_dim();
  for (int64_t d : dims_) proto->add_dim(d);
}

int64_t TensorShape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t TensorShape::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < dims_.size(); ++i) n *= dims_[i];
  return n;
}

std::string TensorShape::ToString() const {
  return absl::StrCat("[", absl::StrJoin(dims_, ","), "]");
}

std::shared_ptr<TensorBuffer> TensorBuffer::TryAllocate(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  if (bytes > SIZE_MAX - kTensorAlignment) return nullptr;
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  void* p = std::aligned_alloc(kTensorAlignment, rounded);
  if (p == nullptr) return nullptr;
  return std::make_shared<TensorBuffer>(p, bytes, [](void* q) { std::free(q); });
}

std::shared_ptr<TensorBuffer> TensorBuffer::Allocate(size_t bytes) {
  std::shared_ptr<TensorBuffer> b = TryAllocate(bytes);
  CHECK(b != nullptr) << "out of memory allocating " << bytes << " bytes";
  return b;
}

absl::StatusOr<Tensor> Tensor::TryAllocate(DataType dtype, TensorShape shape) {
  const uint64_t size = DataTypeSize(dtype);
  if (size == 0) return absl::InvalidArgumentError(absl::StrCat("bad dtype ", static_cast<int>(dtype)));
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape.dim(i) < 0) return absl::InvalidArgumentError(absl::StrCat("shape ", shape.ToString(), " has a negative dimension"));
  }
  uint64_t n = 1;
  for (int i = 0; i < shape.rank(); ++i) {
    const uint64_t d = static_cast<uint64_t>(shape.dim(i));
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / size / d) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", DataTypeName(dtype), shape.ToString(), " is too large"));
    }
    n *= d;
  }
  std::shared_ptr<TensorBuffer> buffer = TensorBuffer::TryAllocate(n * size);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", n * size, " bytes for tensor ",
                                                     DataTypeName(dtype), shape.ToString()));
  }
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

TensorBuffer::TensorBuffer(void* data, size_t size, std::function<void(void*)> release)
    : data_(data), size_(size), release_(std::move(release)) {}

TensorBuffer::~TensorBuffer() {
  if (release_) release_(data_);
}

Tensor::Tensor(DataType dtype, TensorShape shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  CHECK_GT(DataTypeSize(dtype), 0u) << "bad dtype " << dtype;
  // TotalBytes() wraps around for such a shape and would allocate a buffer
  // far smaller than the tensor: fail loudly, like any allocation too big.
  CHECK_LE(static_cast<uint64_t>(NumElements()),
           std::numeric_limits<uint64_t>::max() / DataTypeSize(dtype))
      << "tensor " << DataTypeName(dtype) << shape_.ToString() << " is too large";
  buffer_ = TensorBuffer::Allocate(TotalBytes());
}

Tensor::Tensor(DataType dtype, TensorShape shape, std::shared_ptr<TensorBuffer> buffer,
               size_t offset)
    : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)), offset_(offset) {
  CHECK_GT(DataTypeSize(dtype), 0u) << "bad dtype " << dtype;
  CHECK(buffer_ != nullptr);
  CHECK_LE(offset_ + TotalBytes(), buffer_->size());
}

Tensor Tensor::Zeros(DataType dtype, TensorShape shape) {
  Tensor t(dtype, std::move(shape));
  std::memset(t.raw_data(), 0, t.TotalBytes());
  return t;
}

const void* Tensor::raw_data() const {
  return buffer_ ? static_cast<const char*>(buffer_->data()) + offset_ : nullptr;
}

void* Tensor::raw_data() {
  return buffer_ ? static_cast<char*>(buffer_->data()) + offset_ : nullptr;
}

void Tensor::CheckType(DataType t) const {
  CHECK_EQ(dtype_, t) << "tensor is " << DataTypeName(dtype_) << ", accessed as "
                      << DataTypeName(t);
}

Tensor Tensor::Copy() const {
  if (!IsValid()) return Tensor();
  Tensor t(dtype_, shape_);
  std::memcpy(t.raw_data(), raw_data(), TotalBytes());
  return t;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  CHECK_GE(shape_.rank(), 1);
  CHECK(0 <= begin && begin <= end && end <= shape_.dim(0))
      << "slice [" << begin << "," << end << ") of " << shape_.ToString();
  std::vector<int64_t> dims = shape_.dims();
  dims[0] = end - begin;
  size_t row_bytes = shape_.row_elements() * DataTypeSize(dtype_);
  return Tensor(dtype_, TensorShape(std::move(dims)), buffer_, offset_ + begin * row_bytes);
}

absl::StatusOr<Tensor> Tensor::Reshape(TensorShape shape) const {
  if (shape.num_elements() != NumElements()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", shape_.ToString(),
                                                   " to ", shape.ToString()));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::ToProto(TensorProto* proto) const {
  proto->set_dtype(dtype_);
  shape_.ToProto(proto->mutable_shape());
  proto->set_content(static_cast<const char*>(raw_data()), TotalBytes());
}

absl::Status CheckContentSize(DataType dtype, const TensorShape& shape, uint64_t bytes) {
  const uint64_t size = DataTypeSize(dtype);
  const uint64_t n = static_cast<uint64_t>(shape.num_elements());
  if (size == 0 || bytes % size != 0 || bytes / size != n) {
    // Spelled out in 128 bits so the message is right even when it overflows.
    const unsigned __int128 want = static_cast<unsigned __int128>(n) * size;
    std::string want_text = want >> 64 == 0 ? absl::StrCat(static_cast<uint64_t>(want))
                                            : absl::StrCat(n, " x ", size);
    return absl::InvalidArgumentError(absl::StrCat("tensor content is ", bytes, " bytes but ",
                                                   DataTypeName(dtype), shape.ToString(),
                                                   " needs ", want_text));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Tensor::FromProto(const TensorProto& proto) {
  if (DataTypeSize(proto.dtype()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor dtype ", DataTypeName(proto.dtype()), " is not supported"));
  }
  absl::StatusOr<TensorShape> shape = TensorShape::FromProto(proto.shape());
  if (!shape.ok()) return shape.status();
  // Before allocating: the shape is untrusted and may ask for terabytes.
  absl::Status size_ok = CheckContentSize(proto.dtype(), *shape, proto.content().size());
  if (!size_ok.ok()) return size_ok;
  Tensor t(proto.dtype(), *std::move(shape));
  std::memcpy(t.raw_data(), proto.content().data(), t.TotalBytes());
  return t;
}

std::string Tensor::DebugString(int max_values) const {
  std::string s = absl::StrCat(DataTypeName(dtype_), shape_.ToString());
  if (!IsValid()) return s;
  int64_t n = std::min<int64_t>(NumElements(), max_values);
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype_) {
      case DT_FLOAT: v.push_back(absl::StrCat(data<float>()[i])); break;
      case DT_DOUBLE: v.push_back(absl::StrCat(data<double>()[i])); break;
      case DT_INT32: v.push_back(absl::StrCat(data<int32_t>()[i])); break;
      case DT_INT64: v.push_back(absl::StrCat(data<int64_t>()[i])); break;
      default: break;
    }
  }
  return absl::StrCat(s, " {", absl::StrJoin(v, ", "), NumElements() > n ? ", ..." : "", "}");
}

}  // namespace psrt
