#include "common/plan/placement.h"

#include <map>

#include "gtest/gtest.h"

namespace psrt {
namespace {

VariableDef Var(const std::string& name, std::vector<int64_t> shape,
                VariableDef::Kind kind = VariableDef::DENSE) {
  VariableDef v;
  v.set_name(name);
  v.set_kind(kind);
  for (int64_t d : shape) v.mutable_shape()->add_dim(d);
  return v;
}

TEST(PlacementTest, GreedyByBytesBalancesThePs) {
  auto p = PlaceVariables({Var("small", {10}), Var("big", {1000, 100}), Var("mid", {500, 100}),
                           Var("mid2", {400, 100})},
                          2, int64_t{1} << 30);
  ASSERT_TRUE(p.ok());
  std::map<std::string, int> where;
  for (const auto& v : p->variable()) {
    ASSERT_EQ(v.shard_size(), 1);
    where[v.variable().name()] = v.shard(0).ps_task();
  }
  EXPECT_EQ(where["big"], 0);
  EXPECT_EQ(where["mid"], 1);
  EXPECT_EQ(where["mid2"], 1);  // 500+400 rows < 1000 rows on ps 0
  EXPECT_EQ(where["small"], 1);
}

TEST(PlacementTest, LargeVariablesArePartitionedByRowsAndHashTablesSpread) {
  auto p = PlaceVariables({Var("emb", {1001, 8}, VariableDef::FIXED_TABLE), Var("h", {0, 8}, VariableDef::HASH_TABLE),
                           Var("w", {10, 10})},
                          3, 1000);
  ASSERT_TRUE(p.ok());
  const auto& emb = p->variable(0);
  ASSERT_EQ(emb.shard_size(), 3);
  EXPECT_EQ(emb.shard(0).row_begin(), 0);
  EXPECT_EQ(emb.shard(2).row_end(), 1001);
  for (int s = 1; s < 3; ++s) EXPECT_EQ(emb.shard(s).row_begin(), emb.shard(s - 1).row_end());
  EXPECT_EQ(p->variable(1).shard_size(), 3);
  EXPECT_EQ(p->variable(2).shard_size(), 1);
  EXPECT_FALSE(PlaceVariables({}, 0, 1).ok());

  // What each PS creates: its row slice, or its hash shard by list index.
  for (int ps = 0; ps < 3; ++ps) {
    std::map<std::string, VariableDef> on;
    for (const VariableDef& v : VariablesOnStore(*p, ps)) on[v.name()] = v;
    EXPECT_EQ(on["emb"].row_begin(), emb.shard(ps).row_begin());
    EXPECT_EQ(on["emb"].row_end(), emb.shard(ps).row_end());
    EXPECT_EQ(on["h"].hash_shard(), ps);
    EXPECT_EQ(on["h"].hash_shards(), 3);
    EXPECT_EQ(on["h"].row_end(), 0);
    EXPECT_EQ(on.count("w"), p->variable(2).shard(0).ps_task() == ps ? 1u : 0u);
    if (on.count("w")) {
      EXPECT_EQ(on["w"].row_end(), 0);  // whole: no slice
    }
  }
}

}  // namespace
}  // namespace psrt
