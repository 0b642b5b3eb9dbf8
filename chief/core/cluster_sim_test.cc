#include "chief/core/cluster_sim.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// How many seeds: PSRT_SIM_SEEDS in the environment (a long run), else
// enough for CI's time.
int Seeds(int fallback) {
  const char* env = std::getenv("PSRT_SIM_SEEDS");
  return env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : fallback;
}

std::string Describe(const SimOptions& o, const SimResult& r) {
  return absl::StrCat("seed ", o.seed, " (", o.num_ps, " PS, ", o.num_workers, " workers, ",
                      o.sync ? "SYNC" : "ASYNC", ", ", o.end_step, " steps): ", absl::StrJoin(r.violations, "; "),
                      "\nlast events:\n  ", absl::StrJoin(r.history, "\n  "),
                      "\nreplay: bazel test //chief/core:cluster_sim_test --test_env=PSRT_SIM_SEED=", o.seed);
}

TEST(ClusterSimTest, EveryInvariantHoldsOnEverySeed) {
  const char* only = std::getenv("PSRT_SIM_SEED");
  const uint64_t first = only != nullptr ? std::strtoull(only, nullptr, 10) : 1;
  const int n = only != nullptr ? 1 : Seeds(10000);
  int64_t faults = 0, recoveries = 0, changes = 0, restarts = 0, partial = 0, duplicates = 0, cuts = 0, skipped = 0;
  int failed = 0;
  for (uint64_t seed = first; seed < first + n; ++seed) {
    const SimOptions o = SimOptionsForSeed(seed);
    const SimResult r = RunSimulation(o);
    faults += r.faults;
    recoveries += r.recoveries;
    changes += r.membership_changes;
    restarts += r.chief_restarts;
    partial += r.partial_steps;
    duplicates += r.duplicate_pushes;
    cuts += r.bucket_cuts;
    skipped += r.skipped_buckets;
    if (!r.violations.empty() && ++failed <= 3) ADD_FAILURE() << Describe(o, r);
  }
  EXPECT_EQ(failed, 0) << failed << " of " << n << " seeds broke an invariant";
  std::printf(
      "%d seeds: %lld faults, %lld recoveries, %lld membership changes, %lld chief restarts, "
      "%lld steps pushed to only some PS when their worker was killed (%lld of them cut between two buckets), "
      "%lld pushes answered as duplicates, %lld buckets a PS had skipped when pushed again\n",
      n, static_cast<long long>(faults), static_cast<long long>(recoveries), static_cast<long long>(changes),
      static_cast<long long>(restarts), static_cast<long long>(partial), static_cast<long long>(cuts),
      static_cast<long long>(duplicates), static_cast<long long>(skipped));
}

// A seed replays exactly: the same history, event for event.
TEST(ClusterSimTest, ASeedReplaysExactly) {
  for (uint64_t seed : {7u, 99u, 1234u}) {
    const SimResult a = RunSimulation(SimOptionsForSeed(seed));
    const SimResult b = RunSimulation(SimOptionsForSeed(seed));
    EXPECT_EQ(a.history, b.history) << "seed " << seed;
    EXPECT_EQ(a.virtual_time, b.virtual_time);
    EXPECT_GT(a.faults + b.faults, 0);
  }
}

// Without faults every shape finishes, and its checkpoints are taken.
TEST(ClusterSimTest, WithoutFaultsEveryShapeFinishes) {
  for (bool sync : {false, true}) {
    SimOptions o;
    o.sync = sync;
    o.num_ps = 2;
    o.num_workers = 3;
    o.fault_rate_per_s = 0;
    o.chief_restarts = false;
    const SimResult r = RunSimulation(o);
    EXPECT_TRUE(r.done) << absl::StrJoin(r.violations, "; ");
    EXPECT_TRUE(r.violations.empty()) << absl::StrJoin(r.violations, "; ");
    EXPECT_GE(r.checkpoints, o.end_step / o.checkpoint_every_steps);
    EXPECT_EQ(r.faults, 0);
  }
}

}  // namespace
}  // namespace psrt
