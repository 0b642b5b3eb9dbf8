// --help for psrt's binaries: the usage, then every flag the binary reads,
// one line each, and exit status 0.
//
// Abseil's own --help lists only flags defined in a file named after the
// binary (so `chief/main --help`, whose flags are in chief_main.cc, said
// "No flags matched") and none of the shared ones (--cluster_spec, --task,
// TLS in common/daemon.cc). Here each main says where its flags are:
//
//   int main(int argc, char** argv) {
//     psrt::HandleHelp(argc, argv, kUsage, {{__FILE__, psrt::DaemonFlagsFile()}, {}});
//     absl::ParseCommandLine(argc, argv);
//
// --helpfull and --help=SUBSTRING stay Abseil's.
#ifndef PSRT_COMMON_FLAGS_HELP_H_
#define PSRT_COMMON_FLAGS_HELP_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace psrt {

// The flags a binary reads: every flag defined in `files` (as __FILE__
// names them, e.g. "chief/chief_main.cc"), and `flags` by name wherever
// they are defined.
struct HelpFlags {
  std::vector<std::string> files;
  std::vector<std::string> flags;
};

// "--name=DEFAULT  help" for each flag of `help`, sorted by name, one line
// each (a help text's line breaks become spaces), after `usage`.
std::string HelpText(absl::string_view usage, const HelpFlags& help);

// When argv holds --help or -help (alone, no value): prints HelpText to
// stdout and exits 0. Otherwise returns. Call before absl::ParseCommandLine.
void HandleHelp(int argc, char** argv, absl::string_view usage, const HelpFlags& help);

}  // namespace psrt

#endif  // PSRT_COMMON_FLAGS_HELP_H_
