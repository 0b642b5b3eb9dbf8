#include "common/plan/job_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(int64_t, max_job_file_mb, 16, "A job file larger than this (MiB) is refused before it is parsed.");
ABSL_FLAG(int, max_model_layers, 10000, "A job whose model.sequential has more layers is refused before it is built.");
ABSL_FLAG(int, max_graph_nodes, 100000, "A job whose model.graph has more nodes is refused before it is built.");

namespace psrt {

absl::StatusOr<JobLimits> JobLimitsFromFlags() {
  JobLimits limits;
  const int64_t mb = absl::GetFlag(FLAGS_max_job_file_mb);
  if (mb < 1 || mb > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("--max_job_file_mb=", mb, ": want 1 to 1048576"));
  }
  limits.max_file_bytes = mb << 20;
  limits.max_layers = absl::GetFlag(FLAGS_max_model_layers);
  if (limits.max_layers < 1) return absl::InvalidArgumentError(absl::StrCat("--max_model_layers=", limits.max_layers, ": want at least 1"));
  limits.max_graph_nodes = absl::GetFlag(FLAGS_max_graph_nodes);
  if (limits.max_graph_nodes < 1) return absl::InvalidArgumentError(absl::StrCat("--max_graph_nodes=", limits.max_graph_nodes, ": want at least 1"));
  return limits;
}

const char* JobFlagsFile() { return __FILE__; }

}  // namespace psrt
