#include "common/plan/placement_move.h"

#include "common/plan/placement.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

VariableDef Dense(const std::string& name, std::vector<int64_t> shape) {
  VariableDef v;
  v.set_name(name);
  for (int64_t d : shape) v.mutable_shape()->add_dim(d);
  return v;
}

int PsOf(const PlacementMap& m, const std::string& name) {
  for (const VariablePlacement& vp : m.variable()) {
    if (vp.variable().name() == name) return vp.shard(0).ps_task();
  }
  return -1;
}

// The MLP's four variables on two PS, then a third joins.
TEST(PlacementMoveTest, JoinerTakesTheShareGreedyGivesItAndNothingElseMoves) {
  std::vector<VariableDef> defs = {Dense("k1", {784, 128}), Dense("b1", {128}), Dense("k2", {128, 10}),
                                   Dense("b2", {10})};
  PlacementMap two = *PlaceVariables(defs, 2, INT64_MAX);
  ASSERT_EQ(PsOf(two, "k1"), 0);
  auto plan = PlanPsJoin(two, {0, 1}, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->moves.empty());
  for (const ShardMove& m : plan->moves) {
    EXPECT_EQ(m.to, 2);
    EXPECT_EQ(PsOf(plan->placement, m.variable), 2);
    EXPECT_EQ(PsOf(two, m.variable), m.from);
  }
  EXPECT_EQ(PsOf(plan->placement, "k1"), 0) << "the largest stays where it was";
  // Every variable not moved is where it was.
  int moved = 0;
  for (const VariablePlacement& vp : plan->placement.variable()) {
    const int before = PsOf(two, vp.variable().name());
    if (vp.shard(0).ps_task() != before) ++moved;
  }
  EXPECT_EQ(moved, static_cast<int>(plan->moves.size()));

  // And it leaves again: its variables go to the others, none stays on it.
  auto leave = PlanPsLeave(plan->placement, {0, 1, 2}, 2);
  ASSERT_TRUE(leave.ok()) << leave.status();
  EXPECT_EQ(leave->moves.size(), plan->moves.size());
  for (const VariablePlacement& vp : leave->placement.variable()) EXPECT_NE(vp.shard(0).ps_task(), 2);
}

TEST(PlacementMoveTest, RefusesWhatCannotMove) {
  VariableDef table = Dense("emb", {1000, 8});
  table.set_kind(VariableDef::HASH_TABLE);
  PlacementMap spread = *PlaceVariables({table, Dense("w", {8})}, 2, INT64_MAX);
  auto leave = PlanPsLeave(spread, {0, 1}, 1);
  ASSERT_FALSE(leave.ok());
  EXPECT_EQ(leave.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(leave.status().message().find("emb"), std::string::npos) << leave.status();
  // A join leaves the hash table where it is.
  auto join = PlanPsJoin(spread, {0, 1}, 2);
  ASSERT_TRUE(join.ok()) << join.status();
  for (const ShardMove& m : join->moves) EXPECT_NE(m.variable, "emb");
  EXPECT_FALSE(PlanPsLeave(spread, {0}, 0).ok()) << "the last PS";
  EXPECT_FALSE(PlanPsJoin(spread, {0, 1}, 1).ok()) << "already a PS";
  EXPECT_FALSE(PlanPsLeave(spread, {0, 1}, 5).ok()) << "not a PS";
}

}  // namespace
}  // namespace psrt
