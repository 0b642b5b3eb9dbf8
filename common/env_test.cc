#include "common/env.h"

#include <set>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(EnvTest, IncarnationIdsAreNonZeroAndDistinct) {
  std::set<uint64_t> ids;
  for (int i = 0; i < 1000; ++i) {
    uint64_t id = NewIncarnationId();
    EXPECT_NE(id, 0u);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(EnvTest, DefaultClockMovesAndRandomIsInRange) {
  Env* env = Env::Default();
  absl::Time a = env->Now();
  env->SleepFor(absl::Milliseconds(2));
  EXPECT_GE(env->Now() - a, absl::Milliseconds(2));
  for (int i = 0; i < 100; ++i) {
    double f = env->RandomFraction();
    EXPECT_GE(f, 0.0);
    EXPECT_LT(f, 1.0);
  }
}

}  // namespace
}  // namespace psrt
