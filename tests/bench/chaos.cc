// The long real-process chaos run (issue #27): seed after seed of
// tests/harness/chaos_run.h (the default MLP job with 30 epochs, 2 PS, 2 workers, under a
// seeded schedule of faults), until --minutes have passed, then the totals.
//
//   bazel run //tests/bench:chaos -- --minutes=30 --seed=100 --faults=10
//   bazel run //tests/bench:chaos -- --seed=103 --runs=1       (replay one seed)
//   bazel run //tests/bench:chaos -- --seed=100 --runs=5 --print_schedule
//
// Exits 1 if any invariant failed on any seed (each named with its seed).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/harness/chaos_run.h"

ABSL_FLAG(int, minutes, 30, "Start new seeds until this many minutes have passed.");
ABSL_FLAG(int, runs, 0, "At most this many seeds (0: as many as --minutes allows).");
ABSL_FLAG(uint64_t, seed, 1, "The first seed; the next runs take seed+1, seed+2, ...");
ABSL_FLAG(int, faults, 10, "Faults per run.");
ABSL_FLAG(int, epochs, 30, "The job's epochs (twice the example's 15, whose accuracy bar stays the bar).");
ABSL_FLAG(double, accuracy_bar, 0.8833, "The final test accuracy every run must reach.");
ABSL_FLAG(std::string, dir, "", "Where each run's files go (default: /tmp/psrt-chaos-PID).");
ABSL_FLAG(bool, print_schedule, false,
          "Print the schedules of --runs seeds (default 1) from --seed and exit, running nothing (with every kind "
          "of fault; a run without mount rights or libfaketime draws without those).");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // The daemons' binaries are this binary's runfiles (the harness looks
  // for them as a test does).
  if (std::getenv("TEST_SRCDIR") == nullptr) {
    const char* runfiles = std::getenv("RUNFILES_DIR");
    const std::string dir = runfiles != nullptr ? runfiles : std::string(argv[0]) + ".runfiles";
    setenv("TEST_SRCDIR", dir.c_str(), 1);
    setenv("TEST_WORKSPACE", "psrt", 1);
  }
  if (absl::GetFlag(FLAGS_print_schedule)) {
    const int runs = std::max(1, absl::GetFlag(FLAGS_runs));
    for (uint64_t seed = absl::GetFlag(FLAGS_seed); seed < absl::GetFlag(FLAGS_seed) + runs; ++seed) {
      std::cout << "seed " << seed << ":\n";
      for (const psrt::testing::Fault& f : psrt::testing::DrawSchedule(seed, absl::GetFlag(FLAGS_faults), true, true)) {
        std::cout << "  " << f.ToString() << "\n";
      }
    }
    return 0;
  }
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = absl::StrCat("/tmp/psrt-chaos-", getpid());
  const absl::Time start = absl::Now();
  const absl::Duration budget = absl::Minutes(absl::GetFlag(FLAGS_minutes));
  std::map<std::string, int> injected;
  int runs = 0, failed = 0, expected_failures = 0, survived = 0, checkpoints = 0, damaged = 0;
  int64_t rolled_back = 0;
  std::vector<std::string> failed_seeds;
  absl::Duration longest_settle;
  for (uint64_t seed = absl::GetFlag(FLAGS_seed);; ++seed) {
    if (absl::GetFlag(FLAGS_runs) > 0 && runs >= absl::GetFlag(FLAGS_runs)) break;
    if (runs > 0 && absl::Now() - start >= budget) break;
    psrt::testing::ChaosOptions o;
    o.seed = seed;
    o.faults = absl::GetFlag(FLAGS_faults);
    o.epochs = absl::GetFlag(FLAGS_epochs);
    o.accuracy_bar = absl::GetFlag(FLAGS_accuracy_bar);
    o.dir = absl::StrCat(dir, "/seed-", seed);
    psrt::testing::ChaosReport r = psrt::testing::RunChaos(o);
    std::cout << r.ToString() << std::flush;
    ++runs;
    for (const auto& [k, v] : r.injected) injected[k] += v;
    expected_failures += r.expected_failures;
    survived += static_cast<int>(std::max(0.0, r.failures_survived));
    rolled_back += static_cast<int64_t>(std::max(0.0, r.rolled_back_steps));
    checkpoints += r.checkpoints_kept;
    damaged += r.checkpoints_damaged;
    for (double s : r.settle_seconds) longest_settle = std::max(longest_settle, absl::Seconds(s));
    if (!r.violations.empty()) {
      ++failed;
      failed_seeds.push_back(absl::StrCat(seed, " (", absl::StrJoin(r.violations, "; "), ")"));
    }
  }
  std::vector<std::string> kinds;
  int total = 0;
  for (const auto& [k, v] : injected) {
    kinds.push_back(absl::StrCat(k, " ", v));
    total += v;
  }
  std::cout << "\nCHAOS TOTALS\n"
            << "  seeds run:          " << runs << " from " << absl::GetFlag(FLAGS_seed) << ", "
            << absl::GetFlag(FLAGS_faults) << " faults drawn each\n"
            << "  time:               " << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Seconds(1)))
            << "\n"
            << "  faults injected:    " << total << " (" << absl::StrJoin(kinds, ", ") << ")\n"
            << "  recoveries:         " << survived << " failures survived (expected " << expected_failures << ")\n"
            << "  rolled back steps:  " << rolled_back << "\n"
            << "  longest settle:     " << absl::FormatDuration(absl::Trunc(longest_settle, absl::Milliseconds(100)))
            << "\n"
            << "  kept checkpoints:   " << checkpoints << " (" << damaged << " damaged on purpose)\n"
            << "  seeds failing:      " << failed << (failed_seeds.empty() ? "" : ": ")
            << absl::StrJoin(failed_seeds, "\n                      ") << "\n";
  return failed > 0 ? 1 : 0;
}
