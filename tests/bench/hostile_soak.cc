// Issue #28's soak, the long run: the default MLP job twice in one
// invocation, unattacked and then beside hostile clients
// (tests/bench/hostile_soak_lib.h), printing FIGURE: lines for both.
//
//   bazel run //tests/bench:hostile_soak -- --steps=7035 --connections=10000
//
// Exits 0 when both runs finish; the figures are for a reader to judge
// (tests:hostile_soak_test asserts the bounds on a short run).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "tests/bench/hostile_soak_lib.h"

ABSL_FLAG(int64_t, steps, 7035, "Steps of the MLP job (7035: its 15 epochs of 30,000 examples at batch 64).");
ABSL_FLAG(int, workers, 1, "Workers of the job.");
ABSL_FLAG(int, connections, 10000, "Stranger sockets held at once, at most (the fd limit may cap it).");
ABSL_FLAG(int, sources, 200, "Loopback addresses the strangers come from (127.0.1.2 on).");
ABSL_FLAG(int, stalled_frames, 8, "Connections of the worker token each with a stalled 512 MiB frame.");
ABSL_FLAG(int, pull_flooders, 2, "Connections of the worker token flooding pulls never read.");
ABSL_FLAG(int, exchange_flooders, 2,
          "Streams of the worker token over the PS's gRPC Exchange sending pulls never read (0: none).");
ABSL_FLAG(std::vector<std::string>, ps_flags,
          std::vector<std::string>({"--max_unread_answer_mb=8", "--max_unread_answers_total_mb=32"}),
          "Extra PS flags, comma-separated (the default sizes the unread-answer bounds to this model; "
          "--ps_flags= runs the PS with its defaults).");
ABSL_FLAG(bool, ring, false,
          "The ring attack instead (RingOptions): the mirrored MLP job, strangers at both workers' collective "
          "ports, worker:1 killed and restarted under the attack; --steps, --connections and --sources apply.");
ABSL_FLAG(std::string, dir, "", "Scratch directory (default: $TMPDIR or /tmp, then psrt-hostile-soak).");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  psrt::soak::SoakOptions o;
  const char* tmp = std::getenv("TMPDIR");
  o.dir = absl::GetFlag(FLAGS_dir).empty() ? absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/psrt-hostile-soak")
                                           : absl::GetFlag(FLAGS_dir);
  if (absl::GetFlag(FLAGS_ring)) {
    psrt::soak::RingOptions r;
    r.dir = o.dir;
    r.steps = absl::GetFlag(FLAGS_steps);
    r.connections = absl::GetFlag(FLAGS_connections);
    r.sources = absl::GetFlag(FLAGS_sources);
    const psrt::soak::RingRun quiet = psrt::soak::RunMirroredJob(r, /*attack=*/false, "ring-unattacked");
    std::cout << psrt::soak::Describe(quiet) << std::flush;
    const psrt::soak::RingRun loud = psrt::soak::RunMirroredJob(r, /*attack=*/true, "ring-attacked");
    std::cout << psrt::soak::Describe(loud) << std::flush;
    return quiet.finished && loud.finished ? 0 : 1;
  }
  o.steps = absl::GetFlag(FLAGS_steps);
  o.workers = absl::GetFlag(FLAGS_workers);
  o.connections = absl::GetFlag(FLAGS_connections);
  o.sources = absl::GetFlag(FLAGS_sources);
  o.stalled_frames = absl::GetFlag(FLAGS_stalled_frames);
  o.pull_flooders = absl::GetFlag(FLAGS_pull_flooders);
  o.exchange_flooders = absl::GetFlag(FLAGS_exchange_flooders);
  o.ps_flags.clear();
  for (const std::string& f : absl::GetFlag(FLAGS_ps_flags)) {
    if (!f.empty()) o.ps_flags.push_back(f);
  }
  const psrt::soak::SoakRun quiet = psrt::soak::RunJob(o, /*attack=*/false, "unattacked");
  std::cout << psrt::soak::Describe(quiet) << std::flush;
  const psrt::soak::SoakRun loud = psrt::soak::RunJob(o, /*attack=*/true, "attacked");
  std::cout << psrt::soak::Describe(loud) << std::flush;
  return quiet.finished && loud.finished ? 0 : 1;
}
