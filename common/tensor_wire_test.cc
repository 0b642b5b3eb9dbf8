#include "common/tensor_wire.h"

#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "proto/tensor.pb.h"

namespace psrt {
namespace wire {
namespace {

Tensor Iota(int64_t n) {
  Tensor t(DT_FLOAT, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f;
  return t;
}

// Cuts `bytes` into slices of `piece` bytes, as gRPC delivers large messages.
std::vector<grpc::Slice> Pieces(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> out;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    out.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  }
  return out;
}

TEST(TensorWireTest, WriterOutputParsesAsProtobuf) {
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  Writer w;
  w.NamedTensor(1, "dense/kernel", t);
  EXPECT_EQ(w.size(), MessageFieldSize(1, NamedTensorSize("dense/kernel", t)));
  grpc::ByteBuffer buf = w.Finish();

  // The same bytes as a protobuf message holding a NamedTensor as field 1:
  // a TensorProto's field 1 is an enum, so parse via a wrapper type.
  std::string bytes = ToString(buf);
  ASSERT_EQ(bytes.size(), buf.Length());
  Reader r(buf);
  uint32_t field;
  int type;
  ASSERT_TRUE(r.Next(&field, &type));
  EXPECT_EQ(field, 1u);
  // Skip the outer tag and length, then let protobuf parse the body.
  NamedTensor proto;
  size_t header = bytes.size() - NamedTensorSize("dense/kernel", t);
  ASSERT_TRUE(proto.ParseFromString(bytes.substr(header)));
  EXPECT_EQ(proto.name(), "dense/kernel");
  EXPECT_EQ(proto.tensor().dtype(), DT_FLOAT);
  ASSERT_EQ(proto.tensor().shape().dim_size(), 2);
  EXPECT_EQ(proto.tensor().shape().dim(1), 3);
  ASSERT_EQ(proto.tensor().content().size(), 24u);
  EXPECT_EQ(std::memcmp(proto.tensor().content().data(), t.raw_data(), 24), 0);
}

TEST(TensorWireTest, ReaderDecodesProtobufOutputInAnyFieldOrderAndSlicing) {
  Tensor t = Tensor::FromVector<int64_t>({7, -1, 1LL << 50}, TensorShape({3, 1}));
  NamedTensor proto;
  proto.set_name("ids");
  t.ToProto(proto.mutable_tensor());
  std::string body = proto.SerializeAsString();
  // Wrap as field 2 of an outer message, plus an unknown field to skip.
  std::string msg;
  msg.push_back(static_cast<char>((5 << 3) | kVarint));
  msg.push_back(42);
  msg.push_back(static_cast<char>((2 << 3) | kLengthDelimited));
  msg.push_back(static_cast<char>(body.size()));
  msg += body;

  for (size_t piece : {size_t{1}, size_t{3}, size_t{7}, msg.size()}) {
    Reader r(Pieces(msg, piece));
    uint32_t field;
    int type;
    ASSERT_TRUE(r.Next(&field, &type));
    EXPECT_EQ(field, 5u);
    ASSERT_TRUE(r.Skip(type));
    ASSERT_TRUE(r.Next(&field, &type));
    EXPECT_EQ(field, 2u);
    auto nt = r.ReadNamedTensor();
    ASSERT_TRUE(nt.ok()) << nt.status();
    EXPECT_EQ(nt->first, "ids");
    EXPECT_EQ(nt->second.shape(), TensorShape({3, 1}));
    EXPECT_EQ(nt->second.data<int64_t>()[2], 1LL << 50);
    EXPECT_FALSE(r.Next(&field, &type));
    EXPECT_TRUE(r.status().ok()) << r.status();
  }

  // Content before dtype and shape (another encoder's choice) still decodes.
  std::string content = proto.tensor().content();
  TensorProto shape_only = proto.tensor();
  shape_only.clear_content();
  std::string reordered;
  reordered.push_back(static_cast<char>((3 << 3) | kLengthDelimited));
  reordered.push_back(static_cast<char>(content.size()));
  reordered += content + shape_only.SerializeAsString();
  std::string wrapped;
  wrapped.push_back(static_cast<char>((1 << 3) | kLengthDelimited));
  wrapped.push_back(static_cast<char>(reordered.size()));
  wrapped += reordered;
  Reader r(Pieces(wrapped, 5));
  uint32_t field;
  int type;
  ASSERT_TRUE(r.Next(&field, &type));
  auto back = r.ReadTensor();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data<int64_t>()[0], 7);
}

TEST(TensorWireTest, SixteenMiBPushCopiesNothingOnSendAndOnceOnReceive) {
  const int64_t n = 4 << 20;  // 16 MiB of float32
  Tensor t = Iota(n);
  uint64_t before = TensorBytesCopied();
  Writer w;
  w.Varint(3, 17);
  w.NamedTensor(2, "w", t);
  grpc::ByteBuffer buf = w.Finish();
  EXPECT_EQ(TensorBytesCopied(), before);

  // The tensor's own memory is one of the slices gRPC will send.
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buf.Dump(&slices).ok());
  bool found = false;
  for (const auto& s : slices) {
    if (s.begin() == static_cast<const uint8_t*>(t.raw_data()) && s.size() == t.TotalBytes()) {
      found = true;
    }
  }
  EXPECT_TRUE(found);

  Reader r(buf);
  uint32_t field;
  int type;
  Tensor got;
  while (r.Next(&field, &type)) {
    if (field == 2) {
      auto nt = r.ReadNamedTensor();
      ASSERT_TRUE(nt.ok()) << nt.status();
      got = nt->second;
    } else {
      ASSERT_TRUE(r.Skip(type));
    }
  }
  ASSERT_TRUE(r.status().ok());
  EXPECT_EQ(TensorBytesCopied() - before, static_cast<uint64_t>(n * 4));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got.raw_data()) % kTensorAlignment, 0u);
  EXPECT_FALSE(got.SharesBufferWith(t));
  EXPECT_EQ(std::memcmp(got.raw_data(), t.raw_data(), t.TotalBytes()), 0);
}

TEST(TensorWireTest, SliceKeepsTheTensorBufferAliveUntilGrpcReleasesIt) {
  static float storage[64];
  int released = 0;
  grpc::ByteBuffer buf;
  {
    auto b = std::make_shared<TensorBuffer>(storage, sizeof(storage), [&](void*) { ++released; });
    Tensor t(DT_FLOAT, TensorShape({64}), b);
    Writer w;
    w.Tensor(1, t);
    buf = w.Finish();
  }
  EXPECT_EQ(released, 0);
  buf.Clear();
  EXPECT_EQ(released, 1);
}

TEST(TensorWireTest, AllocatorSuppliesStorage) {
  Tensor t = Iota(16);
  Writer w;
  w.Tensor(1, t);
  grpc::ByteBuffer buf = w.Finish();
  int calls = 0;
  Reader r(buf);
  r.set_allocator([&](size_t n) {
    ++calls;
    return TensorBuffer::Allocate(n);
  });
  uint32_t field;
  int type;
  ASSERT_TRUE(r.Next(&field, &type));
  ASSERT_TRUE(r.ReadTensor().ok());
  EXPECT_EQ(calls, 1);
}

TEST(TensorWireTest, ScalarAndEmptyTensorsRoundTrip) {
  for (Tensor t : {Tensor::Scalar<float>(2.5f), Tensor::Zeros(DT_FLOAT, TensorShape({0, 4}))}) {
    Writer w;
    w.Tensor(1, t);
    grpc::ByteBuffer buf = w.Finish();
    Reader r(buf);
    uint32_t field;
    int type;
    ASSERT_TRUE(r.Next(&field, &type));
    auto back = r.ReadTensor();
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shape(), t.shape());
    EXPECT_EQ(back->TotalBytes(), t.TotalBytes());
  }
}

absl::Status DecodeOne(const std::string& bytes) {
  Reader r(Pieces(bytes, 4));
  uint32_t field;
  int type;
  while (r.Next(&field, &type)) {
    if (field == 1 && type == kLengthDelimited) {
      auto t = r.ReadTensor();
      if (!t.ok()) return t.status();
    } else if (!r.Skip(type)) {
      break;
    }
  }
  return r.status();
}

std::string Wrap(const std::string& body) {
  std::string s;
  s.push_back(static_cast<char>((1 << 3) | kLengthDelimited));
  s.push_back(static_cast<char>(body.size()));
  return s + body;
}

TEST(TensorWireTest, RefusesBadTensorsWithNamedErrors) {
  TensorProto p;
  p.set_dtype(DT_FLOAT);
  p.mutable_shape()->add_dim(4);
  p.set_content(std::string(12, 'x'));
  absl::Status s = DecodeOne(Wrap(p.SerializeAsString()));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("12 bytes"), std::string::npos) << s;

  p.set_content(std::string(16, 'x'));
  p.set_dtype(static_cast<DataType>(99));
  s = DecodeOne(Wrap(p.SerializeAsString()));
  EXPECT_NE(s.message().find("not supported"), std::string::npos) << s;

  p.set_dtype(DT_FLOAT);
  p.mutable_shape()->set_dim(0, -4);
  s = DecodeOne(Wrap(p.SerializeAsString()));
  EXPECT_NE(s.message().find("negative"), std::string::npos) << s;
}

// Found by tests/fuzz/tensor_wire_fuzzer: int64 [2^61] needs 2^64 bytes,
// which wrapped to 0 and matched empty content, giving a tensor whose shape
// claimed 2^61 elements over an empty buffer.
TEST(TensorWireTest, RefusesAShapeWhoseByteSizeOverflows) {
  for (int64_t dim : {int64_t{1} << 61, (int64_t{1} << 62) + 1}) {
    TensorProto p;
    p.set_dtype(DT_INT64);
    p.mutable_shape()->add_dim(dim);
    p.mutable_shape()->add_dim(1);
    if (dim & 1) p.set_content(std::string(8, 'x'));  // 8 * (2^62 + 1) wraps to 8
    absl::Status s = DecodeOne(Wrap(p.SerializeAsString()));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << dim;
    EXPECT_NE(s.message().find("needs"), std::string::npos) << s;
    // The protobuf path refuses it too, before allocating anything.
    EXPECT_FALSE(Tensor::FromProto(p).ok()) << dim;
  }
}

TEST(TensorWireTest, EveryTruncationIsAnErrorNotACrash) {
  Writer w;
  w.NamedTensor(1, "v", Iota(8));
  std::string full = ToString(w.Finish());
  for (size_t cut = 1; cut < full.size(); ++cut) {
    Reader r(Pieces(full.substr(0, cut), 3));
    uint32_t field;
    int type;
    absl::Status s;
    if (r.Next(&field, &type)) s = r.ReadNamedTensor().status();
    if (s.ok()) s = r.status();
    EXPECT_FALSE(s.ok()) << "cut at " << cut;
  }
}

TEST(TensorWireTest, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    (void)DecodeOne(bytes);
  }
}

}  // namespace
// A shape is capped at kMaxRank dims, whatever the wire holds: 64 MiB of
// packed zero dims used to cost the PS 17-34 times that (issue #17).
std::string Varint(uint64_t n) {
  std::string out;
  while (n >= 0x80) {
    out.push_back(static_cast<char>(n | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out;
}

TEST(TensorWireTest, ShapesWithMoreThanMaxRankDimsAreRefusedCheaply) {
  for (bool packed : {true, false}) {
    TensorProto head;
    head.set_dtype(DT_FLOAT);
    std::string body = head.SerializeAsString();
    if (packed) {
      TensorProto shape_only;
      for (int i = 0; i < (1 << 20); ++i) shape_only.mutable_shape()->add_dim(0);
      body += shape_only.SerializeAsString();
    } else {
      std::string dims;  // each dim its own field: tag 0x08, varint 0
      for (int i = 0; i < (1 << 20); ++i) dims += std::string("\x08\x00", 2);
      body += std::string(1, '\x12') + Varint(dims.size()) + dims;  // TensorProto.shape
    }
    std::string wrapped = std::string(1, static_cast<char>((1 << 3) | kLengthDelimited)) + Varint(body.size()) + body;
    Reader r(Pieces(wrapped, 3));
    uint32_t field;
    int type;
    ASSERT_TRUE(r.Next(&field, &type));
    auto t = r.ReadTensor();
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << (packed ? "packed" : "unpacked");
    EXPECT_NE(std::string(t.status().message()).find("more than 32"), std::string::npos) << t.status();
  }
}

}  // namespace wire
}  // namespace psrt
