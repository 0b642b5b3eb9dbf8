#include "chief/cluster_clients.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

VariableDef Def(VariableDef::Kind kind, int64_t rows, int64_t cols) {
  VariableDef v;
  v.set_kind(kind);
  v.mutable_shape()->add_dim(rows);
  v.mutable_shape()->add_dim(cols);
  return v;
}

// A first creation may take as long as writing what it makes: a small job
// keeps the 30 s deadline, a 10^7 x 16 table gets minutes, hash tables
// (rows made on first touch) and another PS's rows add nothing.
TEST(CreateVariablesTimeoutTest, GrowsWithTheBytesTheRequestMakes) {
  CreateVariablesRequest small;
  *small.add_variable() = Def(VariableDef::DENSE, 784, 256);
  EXPECT_LT(CreateVariablesTimeout(small), absl::Seconds(31));
  EXPECT_GE(CreateVariablesTimeout(small), absl::Seconds(30));

  CreateVariablesRequest table;
  *table.add_variable() = Def(VariableDef::FIXED_TABLE, 10'000'000, 16);
  // 10^7 x 16 floats, values and two slots: 1.92 GB at 10 MB/s.
  EXPECT_GE(CreateVariablesTimeout(table), absl::Seconds(30 + 190));

  CreateVariablesRequest hash;
  *hash.add_variable() = Def(VariableDef::HASH_TABLE, 10'000'000, 16);
  EXPECT_LT(CreateVariablesTimeout(hash), absl::Seconds(31));

  CreateVariablesRequest slice = table;
  slice.mutable_variable(0)->set_row_begin(0);
  slice.mutable_variable(0)->set_row_end(1000);
  EXPECT_LT(CreateVariablesTimeout(slice), absl::Seconds(31));

  // A centered RMSprop with momentum keeps three slots: 2.56 GB.
  CreateVariablesRequest rmsprop = table;
  rmsprop.mutable_optimizer()->mutable_rmsprop()->set_learning_rate(0.001f);
  rmsprop.mutable_optimizer()->mutable_rmsprop()->set_momentum(0.9f);
  rmsprop.mutable_optimizer()->mutable_rmsprop()->set_centered(true);
  EXPECT_GE(CreateVariablesTimeout(rmsprop), absl::Seconds(30 + 255));
  // Plain SGD keeps none: 0.64 GB.
  CreateVariablesRequest sgd = table;
  sgd.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1f);
  EXPECT_LT(CreateVariablesTimeout(sgd), absl::Seconds(30 + 65));

  CreateVariablesRequest huge;
  *huge.add_variable() = Def(VariableDef::DENSE, int64_t{1} << 40, int64_t{1} << 20);
  EXPECT_EQ(CreateVariablesTimeout(huge), absl::Hours(1));
}

}  // namespace
}  // namespace psrt
