#include "common/tensor.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(TensorTest, AllocatesAlignedStorageOfTheRightSize) {
  Tensor t(DT_FLOAT, TensorShape({3, 5}));
  EXPECT_EQ(t.NumElements(), 15);
  EXPECT_EQ(t.TotalBytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kTensorAlignment, 0u);
  Tensor i(DT_INT64, TensorShape({7}));
  EXPECT_EQ(i.TotalBytes(), 56u);
}

TEST(TensorTest, CopySharesAndDeepCopyDoesNot) {
  Tensor a = Tensor::Zeros(DT_FLOAT, TensorShape({4}));
  Tensor b = a;
  b.data<float>()[2] = 7.0f;
  EXPECT_EQ(a.data<float>()[2], 7.0f);
  EXPECT_TRUE(a.SharesBufferWith(b));
  Tensor c = a.Copy();
  c.data<float>()[2] = 1.0f;
  EXPECT_EQ(a.data<float>()[2], 7.0f);
  EXPECT_FALSE(a.SharesBufferWith(c));
}

TEST(TensorTest, EigenMatrixViewIsRowMajor) {
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  auto m = t.matrix<float>();
  EXPECT_EQ(m.rows(), 2);
  EXPECT_EQ(m.cols(), 3);
  EXPECT_EQ(m(1, 0), 4.0f);
  m(0, 2) = 9.0f;
  EXPECT_EQ(t.data<float>()[2], 9.0f);
  EXPECT_FLOAT_EQ(t.flat<float>().sum(), 1 + 2 + 9 + 4 + 5 + 6);
}

TEST(TensorTest, SliceViewsRowsOfTheSameBuffer) {
  Tensor t = Tensor::FromVector<float>({0, 1, 2, 3, 4, 5, 6, 7}, TensorShape({4, 2}));
  Tensor s = t.Slice(1, 3);
  EXPECT_EQ(s.shape(), TensorShape({2, 2}));
  EXPECT_EQ(s.data<float>()[0], 2.0f);
  EXPECT_EQ(s.data<float>()[3], 5.0f);
  EXPECT_TRUE(s.SharesBufferWith(t));
}

TEST(TensorTest, ReshapeKeepsElementsAndRefusesOtherCounts) {
  Tensor t = Tensor::Zeros(DT_FLOAT, TensorShape({2, 6}));
  auto r = t.Reshape(TensorShape({3, 4}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->SharesBufferWith(t));
  auto bad = t.Reshape(TensorShape({5}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("[2,6]"), std::string::npos);
}

TEST(TensorTest, ProtoRoundTrip) {
  Tensor t = Tensor::FromVector<int64_t>({1, -2, 1LL << 40}, TensorShape({3}));
  TensorProto p;
  t.ToProto(&p);
  auto back = Tensor::FromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype(), DT_INT64);
  EXPECT_EQ(back->data<int64_t>()[2], 1LL << 40);
}

TEST(TensorTest, FromProtoRefusesBadInput) {
  TensorProto p;
  p.set_dtype(DT_FLOAT);
  p.mutable_shape()->add_dim(4);
  p.set_content(std::string(15, '\0'));
  auto r = Tensor::FromProto(p);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("15 bytes"), std::string::npos) << r.status();

  p.set_content(std::string(16, '\0'));
  p.mutable_shape()->set_dim(0, -4);
  EXPECT_NE(Tensor::FromProto(p).status().message().find("negative"), std::string::npos);

  p.mutable_shape()->set_dim(0, 4);
  p.set_dtype(DT_INVALID);
  EXPECT_NE(Tensor::FromProto(p).status().message().find("not supported"), std::string::npos);

  p.set_dtype(DT_FLOAT);
  p.mutable_shape()->set_dim(0, 1LL << 40);
  p.mutable_shape()->add_dim(1LL << 40);
  EXPECT_NE(Tensor::FromProto(p).status().message().find("overflow"), std::string::npos);
}

TEST(TensorTest, BufferReleaserRunsWhenLastReferenceGoes) {
  int released = 0;
  static float storage[16];
  {
    auto buf = std::make_shared<TensorBuffer>(storage, sizeof(storage),
                                              [&](void*) { ++released; });
    Tensor a(DT_FLOAT, TensorShape({16}), buf);
    Tensor b = a;
    buf.reset();
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

}  // namespace
}  // namespace psrt
