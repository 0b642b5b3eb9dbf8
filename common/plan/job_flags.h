// The flags that bound a job file (JobLimits), shared by every main that
// loads one (chief, evaluator, export): the same names everywhere, read
// only in main through JobLimitsFromFlags.
#ifndef PSRT_COMMON_PLAN_JOB_FLAGS_H_
#define PSRT_COMMON_PLAN_JOB_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/plan/job_planner.h"

namespace psrt {

// --max_job_file_mb, --max_model_layers, --max_graph_nodes; INVALID_ARGUMENT
// naming the flag for a value below 1.
absl::StatusOr<JobLimits> JobLimitsFromFlags();
// The file that defines them, for HelpFlags (common/flags_help.h).
const char* JobFlagsFile();

}  // namespace psrt

#endif  // PSRT_COMMON_PLAN_JOB_FLAGS_H_
