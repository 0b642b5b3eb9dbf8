// Tensor: a dtype, a shape and 64-byte-aligned, reference-counted storage.
//
// Copying a Tensor shares its buffer (like TensorFlow's); Copy() makes a
// deep copy. A Tensor may be read from many threads; writers must own it
// exclusively. Eigen views map the storage without copying:
//
//   Tensor w(DT_FLOAT, TensorShape({784, 256}));
//   w.matrix<float>().setZero();
//   Tensor b = Tensor::Zeros(DT_FLOAT, TensorShape({256}));
//   float* p = b.data<float>();
#ifndef PSRT_COMMON_TENSOR_H_
#define PSRT_COMMON_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "glog/logging.h"
#include "proto/tensor.pb.h"

namespace psrt {

inline constexpr size_t kTensorAlignment = 64;

// Bytes per element; 0 for DT_INVALID or an unknown value.
size_t DataTypeSize(DataType dtype);

class TensorShape;
// Whether `bytes` of content are exactly a `dtype` tensor of `shape`, for
// decoders of untrusted messages: the product elements x element size is
// never formed, so a shape whose byte size wraps around 64 bits cannot
// pass for a small one. The error names both sizes.
absl::Status CheckContentSize(DataType dtype, const TensorShape& shape, uint64_t bytes);
std::string DataTypeName(DataType dtype);

template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> { static constexpr DataType value = DT_FLOAT; };
template <>
struct DataTypeOf<double> { static constexpr DataType value = DT_DOUBLE; };
template <>
struct DataTypeOf<int64_t> { static constexpr DataType value = DT_INT64; };
template <>
struct DataTypeOf<int32_t> { static constexpr DataType value = DT_INT32; };

// The most dimensions a tensor may have (TensorFlow allows 254). A shape
// comes from the network: 64 MiB of packed zero dims used to cost the PS
// 17-34 times that in memory.
inline constexpr int kMaxRank = 32;

class TensorShape {
 public:
  TensorShape() = default;  // a scalar
  TensorShape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit TensorShape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  // Refuses negative dims and element counts that overflow int64.
  static absl::StatusOr<TensorShape> FromProto(const TensorShapeProto& proto);
  void ToProto(TensorShapeProto* proto) const;

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t num_elements() const;
  // Product of every dim after the first (1 for rank <= 1).
  int64_t row_elements() const;

  bool operator==(const TensorShape& o) const { return dims_ == o.dims_; }
  bool operator!=(const TensorShape& o) const { return dims_ != o.dims_; }
  std::string ToString() const;  // "[784,256]"

 private:
  std::vector<int64_t> dims_;
};

// Reference-counted storage. The releaser runs when the last reference goes,
// so a pool can take the memory back (see BufferPool).
class TensorBuffer {
 public:
  // Aligned to kTensorAlignment; contents uninitialised. Never null: aborts
  // on out-of-memory like operator new.
  static std::shared_ptr<TensorBuffer> Allocate(size_t bytes);
  // The same, or null where the memory cannot be had: for sizes a file or
  // a peer named.
  static std::shared_ptr<TensorBuffer> TryAllocate(size_t bytes);
  // Adopts memory owned elsewhere; `release` frees it.
  TensorBuffer(void* data, size_t size, std::function<void(void*)> release);
  ~TensorBuffer();
  TensorBuffer(const TensorBuffer&) = delete;
  TensorBuffer& operator=(const TensorBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* const data_;
  const size_t size_;
  std::function<void(void*)> release_;
};

class Tensor {
 public:
  Tensor() = default;  // DT_INVALID, holds nothing
  // Allocates uninitialised storage.
  Tensor(DataType dtype, TensorShape shape);
  // Views `bytes` bytes of `buffer` from `offset`; CHECKs they fit.
  Tensor(DataType dtype, TensorShape shape,
         std::shared_ptr<TensorBuffer> buffer, size_t offset = 0);

  // Allocates as the constructor does, but answers RESOURCE_EXHAUSTED
  // (or INVALID_ARGUMENT for a bad dtype or an overflowing shape) where it
  // would abort: for shapes read from a file or a message.
  static absl::StatusOr<Tensor> TryAllocate(DataType dtype, TensorShape shape);
  static Tensor Zeros(DataType dtype, TensorShape shape);
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, TensorShape shape);
  template <typename T>
  static Tensor Scalar(T value);

  DataType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  int64_t NumElements() const { return shape_.num_elements(); }
  size_t TotalBytes() const { return NumElements() * DataTypeSize(dtype_); }
  bool IsValid() const { return dtype_ != DT_INVALID; }

  const void* raw_data() const;
  void* raw_data();
  template <typename T>
  T* data() { CheckType(DataTypeOf<T>::value); return static_cast<T*>(raw_data()); }
  template <typename T>
  const T* data() const { CheckType(DataTypeOf<T>::value); return static_cast<const T*>(raw_data()); }
  template <typename T>
  absl::Span<const T> span() const { return {data<T>(), static_cast<size_t>(NumElements())}; }

  // Eigen views. flat: all elements; matrix: [dim0, rest] row-major.
  template <typename T>
  using Vector = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
  template <typename T>
  using ConstVector = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;
  template <typename T>
  using Matrix = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  template <typename T>
  using ConstMatrix =
      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

  template <typename T>
  Vector<T> flat() { return Vector<T>(data<T>(), NumElements()); }
  template <typename T>
  ConstVector<T> flat() const { return ConstVector<T>(data<T>(), NumElements()); }
  template <typename T>
  Matrix<T> matrix() { return Matrix<T>(data<T>(), Rows(), shape_.row_elements()); }
  template <typename T>
  ConstMatrix<T> matrix() const { return ConstMatrix<T>(data<T>(), Rows(), shape_.row_elements()); }

  // A deep copy with its own buffer.
  Tensor Copy() const;
  // Rows [begin, end) of dim 0, sharing this buffer (not 64-aligned in general).
  Tensor Slice(int64_t begin, int64_t end) const;
  // The same buffer seen with another shape of the same element count.
  absl::StatusOr<Tensor> Reshape(TensorShape shape) const;
  bool SharesBufferWith(const Tensor& other) const { return buffer_ && buffer_ == other.buffer_; }
  const std::shared_ptr<TensorBuffer>& buffer() const { return buffer_; }

  // Protobuf form (copies the bytes); for control-plane messages only.
  void ToProto(TensorProto* proto) const;
  // Refuses unknown dtypes, bad shapes and a content size that does not
  // match the shape; names what was wrong.
  static absl::StatusOr<Tensor> FromProto(const TensorProto& proto);

  std::string DebugString(int max_values = 6) const;

 private:
  int64_t Rows() const { return shape_.rank() == 0 ? 1 : shape_.dim(0); }
  void CheckType(DataType t) const;

  DataType dtype_ = DT_INVALID;
  TensorShape shape_;
  std::shared_ptr<TensorBuffer> buffer_;
  size_t offset_ = 0;
};

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, TensorShape shape) {
  Tensor t(DataTypeOf<T>::value, std::move(shape));
  CHECK_EQ(static_cast<int64_t>(values.size()), t.NumElements());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <typename T>
Tensor Tensor::Scalar(T value) {
  Tensor t(DataTypeOf<T>::value, TensorShape());
  *t.data<T>() = value;
  return t;
}

}  // namespace psrt

#endif  // PSRT_COMMON_TENSOR_H_
