#include "common/initializer.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

InitializerDef Kind(InitializerDef::Kind k) {
  InitializerDef d;
  d.set_kind(k);
  return d;
}

TEST(InitializerTest, SameRowSameValuesWhereverItIsMade) {
  TensorShape shape({100, 8});
  std::vector<float> whole(800), part(40 * 8);
  ASSERT_TRUE(InitializeRows(Kind(InitializerDef::GLOROT_UNIFORM), shape, 7, "dense/kernel", 0, 100, whole.data()).ok());
  // A shard holding rows [60, 100), as a partitioned variable's second PS would.
  ASSERT_TRUE(InitializeRows(Kind(InitializerDef::GLOROT_UNIFORM), shape, 7, "dense/kernel", 60, 100, part.data()).ok());
  for (int i = 0; i < 40 * 8; ++i) ASSERT_EQ(part[i], whole[60 * 8 + i]);
  std::vector<float> other(800);
  ASSERT_TRUE(InitializeRows(Kind(InitializerDef::GLOROT_UNIFORM), shape, 7, "dense/bias", 0, 100, other.data()).ok());
  EXPECT_NE(other, whole);  // another variable draws other values
  ASSERT_TRUE(InitializeRows(Kind(InitializerDef::GLOROT_UNIFORM), shape, 8, "dense/kernel", 0, 100, other.data()).ok());
  EXPECT_NE(other, whole);  // another seed too
}

TEST(InitializerTest, GlorotUniformStaysInItsLimitAndFillsIt) {
  TensorShape shape({784, 256});
  std::vector<float> v(784 * 256);
  ASSERT_TRUE(InitializeRows(InitializerDef(), shape, 1, "k", 0, 784, v.data()).ok());  // DEFAULT
  double limit = std::sqrt(6.0 / (784 + 256));
  double sum = 0, sq = 0, mx = 0;
  for (float x : v) {
    ASSERT_LE(std::fabs(x), limit);
    sum += x;
    sq += x * x;
    mx = std::max(mx, static_cast<double>(std::fabs(x)));
  }
  EXPECT_NEAR(sum / v.size(), 0.0, 0.002);
  EXPECT_NEAR(sq / v.size(), limit * limit / 3, 0.05 * limit * limit / 3);  // uniform's variance
  EXPECT_GT(mx, 0.99 * limit);
}

TEST(InitializerTest, TensorGivesItsRowsAndRefusesAMismatch) {
  InitializerDef def = Kind(InitializerDef::TENSOR);
  std::vector<float> values(12);
  for (int i = 0; i < 12; ++i) values[i] = 0.5f * i;
  Tensor::FromVector(values, TensorShape({4, 3})).ToProto(def.mutable_tensor());
  std::vector<float> part(6);
  // Rows [1, 3), as the second shard of a partitioned variable holds them.
  ASSERT_TRUE(InitializeRows(def, TensorShape({4, 3}), 1, "w", 1, 3, part.data()).ok());
  EXPECT_THAT(part, testing::ElementsAre(1.5f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f));
  // Another shape than the variable's, rows past the end, a short payload.
  absl::Status s = InitializeRows(def, TensorShape({3, 4}), 1, "w", 0, 1, part.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), testing::HasSubstr("initializer for w"));
  EXPECT_FALSE(InitializeRows(def, TensorShape({4, 3}), 1, "w", 3, 5, part.data()).ok());
  def.mutable_tensor()->mutable_content()->resize(40);
  EXPECT_FALSE(InitializeRows(def, TensorShape({4, 3}), 1, "w", 0, 2, part.data()).ok());
  EXPECT_THAT(part, testing::Each(0.0f));  // what was refused is zeros, not garbage
}

// Found by tests/fuzz/ps_request_fuzzer: 2^40 rows of no elements took
// hours (a generator seeded per row).
TEST(InitializerTest, ManyEmptyRowsReturnAtOnce) {
  InitializerDef def;
  def.set_kind(InitializerDef::TRUNCATED_NORMAL);
  const int64_t rows = int64_t{1} << 40;
  EXPECT_TRUE(InitializeRows(def, TensorShape({rows, 0}), 1, "v", 0, rows, nullptr).ok());
}

TEST(InitializerTest, TruncatedNormalAndConstants) {
  InitializerDef d = Kind(InitializerDef::TRUNCATED_NORMAL);
  d.set_mean(1.0f);
  d.set_stddev(0.1f);
  std::vector<float> v(10000);
  ASSERT_TRUE(InitializeRows(d, TensorShape({10000}), 3, "t", 0, 10000, v.data()).ok());
  double sum = 0;
  for (float x : v) {
    ASSERT_LE(std::fabs(x - 1.0f), 0.2f + 1e-6f);
    sum += x;
  }
  EXPECT_NEAR(sum / v.size(), 1.0, 0.005);

  InitializerDef c = Kind(InitializerDef::CONSTANT);
  c.set_value(2.5f);
  std::vector<float> w(4);
  ASSERT_TRUE(InitializeRows(c, TensorShape({3, 2}), 0, "c", 1, 3, w.data()).ok());
  EXPECT_THAT(w, testing::Each(2.5f));
  ASSERT_TRUE(InitializeRows(InitializerDef(), TensorShape({4}), 0, "bias", 0, 4, w.data()).ok());
  EXPECT_THAT(w, testing::Each(0.0f));  // DEFAULT of a rank-1 variable
}

TEST(InitializerTest, HashTableRowsByIdAreStable) {
  InitializerDef d = Kind(InitializerDef::UNIFORM);
  d.set_minval(-0.05f);
  d.set_maxval(0.05f);
  TensorShape shape({0, 16});
  std::vector<float> a(16), b(16);
  ASSERT_TRUE(InitializeRow(d, shape, 9, "emb", 1LL << 40, a.data()).ok());
  ASSERT_TRUE(InitializeRow(d, shape, 9, "emb", 1LL << 40, b.data()).ok());
  EXPECT_EQ(a, b);
  for (float x : a) EXPECT_LE(std::fabs(x), 0.05f);
}

TEST(InitializerTest, RefusesBadParameters) {
  InitializerDef d = Kind(InitializerDef::UNIFORM);
  d.set_minval(1);
  d.set_maxval(0);
  float out[4];
  auto s = InitializeRows(d, TensorShape({4}), 0, "w", 0, 4, out);
  EXPECT_THAT(std::string(s.message()), testing::HasSubstr("initializer for w: maxval 0 < minval 1"));
}

TEST(InitializerTest, FansOfMatricesAndKernels) {
  double in, out;
  FanInOut(TensorShape({5, 5, 1, 32}), &in, &out);
  EXPECT_EQ(in, 25);
  EXPECT_EQ(out, 800);
  FanInOut(TensorShape({784, 256}), &in, &out);
  EXPECT_EQ(in, 784);
  EXPECT_EQ(out, 256);
}

}  // namespace
}  // namespace psrt
