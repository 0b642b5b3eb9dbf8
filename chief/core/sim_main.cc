// Runs the cluster simulation over many seeds (the long run), or replays
// one with its history:
//   bazel run //chief/core:sim -- --seeds=1000000
//   bazel run //chief/core:sim -- --seed=4242
#include <cctype>
#include <cstdio>
#include <map>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/flags_help.h"
#include "chief/core/cluster_sim.h"

ABSL_FLAG(int64_t, seeds, 10000, "how many seeds to run, from --first");
ABSL_FLAG(uint64_t, first, 1, "the first seed");
ABSL_FLAG(uint64_t, seed, 0, "replay this seed only, printing its history");

namespace {

// A violation's kind: its text with the numbers taken out.
std::string Kind(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (out.empty() || out.back() != '#') out.push_back('#');
    } else {
      out.push_back(c);
    }
  }
  return out.substr(0, 160);
}

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "The chief's state machine against a simulated cluster, seed after seed; prints how many broke an "
      "invariant and the first seed of each kind (--seed replays one with its history).\n"
      "Usage: sim [--seeds=N] [--first=S] | sim --seed=S";
  psrt::HandleHelp(argc, argv, kUsage, {{__FILE__}, {}});
  absl::SetProgramUsageMessage(kUsage);
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_seed) != 0) {
    const psrt::SimOptions o = psrt::SimOptionsForSeed(absl::GetFlag(FLAGS_seed));
    const psrt::SimResult r = psrt::RunSimulation(o);
    std::printf("seed %llu: %d PS, %d workers, %s, %lld steps\n%s\n", static_cast<unsigned long long>(o.seed),
                o.num_ps, o.num_workers, o.sync ? "SYNC" : "ASYNC", static_cast<long long>(o.end_step),
                absl::StrJoin(r.history, "\n").c_str());
    std::printf("%s\n", r.violations.empty() ? "every invariant held" : absl::StrJoin(r.violations, "\n").c_str());
    return r.violations.empty() ? 0 : 1;
  }
  const absl::Time start = absl::Now();
  std::map<std::string, std::pair<int64_t, uint64_t>> kinds;  // kind -> count, first seed
  int64_t failed = 0, faults = 0, recoveries = 0, changes = 0, restarts = 0;
  const uint64_t first = absl::GetFlag(FLAGS_first);
  const int64_t n = absl::GetFlag(FLAGS_seeds);
  for (uint64_t seed = first; seed < first + static_cast<uint64_t>(n); ++seed) {
    const psrt::SimResult r = psrt::RunSimulation(psrt::SimOptionsForSeed(seed));
    faults += r.faults;
    recoveries += r.recoveries;
    changes += r.membership_changes;
    restarts += r.chief_restarts;
    if (r.violations.empty()) continue;
    ++failed;
    auto& k = kinds[Kind(r.violations.front())];
    if (k.first++ == 0) k.second = seed;
  }
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("%lld seeds in %.1f s (%.0f a minute): %lld failed; %lld faults, %lld recoveries, "
              "%lld membership changes, %lld chief restarts\n",
              static_cast<long long>(n), s, n / s * 60, static_cast<long long>(failed), static_cast<long long>(faults),
              static_cast<long long>(recoveries), static_cast<long long>(changes), static_cast<long long>(restarts));
  for (const auto& [kind, v] : kinds) {
    std::printf("%8lld  first seed %-8llu %s\n", static_cast<long long>(v.first),
                static_cast<unsigned long long>(v.second), kind.c_str());
  }
  return failed == 0 ? 0 : 1;
}
