// Issue #28's goal, short: the MLP job with per-role tokens and the TCP data
// plane, run unattacked and then beside hostile clients (10,000 stranger
// sockets trickling hellos, a worker token hoarding tickets, stalling
// 512 MiB frames and flooding pulls it never reads, over TCP and over the
// gRPC Exchange stream;
// tests/bench/hostile_soak_lib.h). The attacked job must finish with the
// accuracy the other short runs reach, and the PS's and chief's memory
// stay under twice the unattacked figure (the bound, with no
// allowance since connections awaiting their hello hold no thread).
// Timings are printed (FIGURE:), not asserted; the long run is
// tests/bench:hostile_soak.
//
//   bazel test //tests:hostile_soak_test --test_output=streamed
#include <cstdlib>
#include <iostream>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "tests/bench/hostile_soak_lib.h"

namespace psrt {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t out;
  return v != nullptr && absl::SimpleAtoi(v, &out) ? out : fallback;
}

int64_t Most(const soak::Rss& r) { return std::max({r.before_kb, r.during_kb, r.after_kb}); }

TEST(HostileSoakTest, TheJobFinishesWithItsAccuracyAndBoundedMemoryBesideHostileClients) {
  soak::SoakOptions o;
  o.dir = std::getenv("TEST_TMPDIR");
  o.steps = EnvInt("PSRT_HOSTILE_SOAK_STEPS", 3000);
  o.connections = static_cast<int>(EnvInt("PSRT_HOSTILE_SOAK_CONNECTIONS", 10000));
  // One Exchange stream: a paused stream still holds what the PS allows
  // unread (--max_unread_answer_mb, 8 MiB here) and gRPC's buffers; one
  // added 8 MB to this small PS, two added 27 MB, which with the rest of
  // the attack is at its 2x bound (tests/bench/HOSTILE_SOAK_RESULTS.md).
  o.exchange_flooders = static_cast<int>(EnvInt("PSRT_HOSTILE_SOAK_EXCHANGE_FLOODERS", 1));
  const soak::SoakRun quiet = soak::RunJob(o, /*attack=*/false, "unattacked");
  std::cerr << soak::Describe(quiet);
  const soak::SoakRun loud = soak::RunJob(o, /*attack=*/true, "attacked");
  std::cerr << soak::Describe(loud);
  ASSERT_TRUE(quiet.finished) << quiet.probe_last_error << quiet.summary;
  ASSERT_TRUE(loud.finished) << loud.probe_last_error << loud.summary;
  EXPECT_GT(quiet.accuracy, 0.75) << quiet.summary;
  EXPECT_GT(loud.accuracy, 0.75) << loud.summary;
  // The attack happened: strangers were refused or ended by the daemons,
  // and the stalled frames and pull floods were cut off by the PS.
  EXPECT_GT(loud.stranger_opened, 1000);
  EXPECT_GT(loud.stranger_closed_by_peer, 0);
  EXPECT_GT(loud.stalled_opened, 0);
  EXPECT_GT(loud.pulls_sent, 0);
  EXPECT_GT(loud.exchange_frames_sent, 0);
  for (const auto& [what, attacked, unattacked] :
       {std::make_tuple("PS", loud.ps, quiet.ps), std::make_tuple("chief", loud.chief, quiet.chief)}) {
    const int64_t bound = 2 * Most(unattacked);
    EXPECT_LT(attacked.during_kb, bound) << what << " during the attack";
    EXPECT_LT(attacked.after_kb, bound) << what << " after the attack";
  }
  // A worker connecting during the attack was admitted at least once.
  EXPECT_LT(loud.probe_failures, loud.probes) << loud.probe_last_error;
}

// The ring attack (tests/bench/hostile_soak_lib.h, RingOptions): strangers
// at both workers' collective ports of a multi_worker_mirrored job while
// worker:1 is SIGKILLed and restarted; the group must re-form beside them
// and the job finish at the bar. How long the re-formation took, attacked
// and not, is printed (FIGURE:) and bounded loosely: the attacked one
// within the unattacked one plus the collective's connect timeout (30 s:
// a ring that waited for the strangers would take that long or fail).
TEST(HostileSoakTest, AMirroredGroupReformsBesideStrangersAtItsCollectivePorts) {
  soak::RingOptions o;
  o.dir = std::getenv("TEST_TMPDIR");
  o.steps = EnvInt("PSRT_HOSTILE_RING_STEPS", 3000);
  o.connections = static_cast<int>(EnvInt("PSRT_HOSTILE_RING_CONNECTIONS", 2000));
  const soak::RingRun quiet = soak::RunMirroredJob(o, /*attack=*/false, "ring-unattacked");
  std::cerr << soak::Describe(quiet);
  const soak::RingRun loud = soak::RunMirroredJob(o, /*attack=*/true, "ring-attacked");
  std::cerr << soak::Describe(loud);
  ASSERT_TRUE(quiet.finished) << quiet.error << quiet.summary;
  ASSERT_TRUE(loud.finished) << loud.error << loud.summary;
  EXPECT_TRUE(loud.error.empty()) << loud.error;
  EXPECT_GT(quiet.accuracy, 0.75) << quiet.summary;
  EXPECT_GT(loud.accuracy, 0.75) << loud.summary;
  EXPECT_GE(loud.failures_survived, 1);
  EXPECT_GT(loud.stranger_opened, 1000);
  EXPECT_GT(loud.stranger_closed_by_peer, 0);
  ASSERT_GT(quiet.resumed_seconds, 0);
  ASSERT_GT(loud.resumed_seconds, 0);
  EXPECT_LT(loud.resumed_seconds, quiet.resumed_seconds + 30);
}

}  // namespace
}  // namespace psrt
