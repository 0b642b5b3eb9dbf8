// Fuzzes the job parser (chief/job_planner.h ParseJob: protobuf text format
// plus the job's own checks) and, for jobs it accepts, the planner behind
// it: CompileModel's validation of the model, gradients and placement
// (PlanJob). An accepted job printed back as text must parse again, since
// the chief's recovery path re-reads what it wrote.
#include <cstdint>
#include <string>

#include "common/plan/job_planner.h"
#include "google/protobuf/text_format.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<psrt::TrainingJob> job = psrt::ParseJob(text, "fuzz.pbtxt");
  if (!job.ok()) return 0;

  std::string printed;
  Check(google::protobuf::TextFormat::PrintToString(*job, &printed), "print job");
  absl::StatusOr<psrt::TrainingJob> again = psrt::ParseJob(printed, "printed.pbtxt");
  // (Not compared field by field: a NaN may come back with another sign bit.)
  Check(again.ok(), "an accepted job printed as text is refused");

  // Planning on 1 and 3 PS: a refusal is fine, a crash or CHECK is not.
  for (int num_ps : {1, 3}) {
    absl::StatusOr<psrt::JobPlan> plan = psrt::PlanJob(*job, num_ps);
    if (plan.ok()) (void)psrt::AssignmentOf(*job, *plan);
  }
  return 0;
}
