#include "common/daemon.h"

#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, cluster_spec, "",
          "Cluster spec JSON file (TensorFlow's TF_CONFIG format, or just its \"cluster\" "
          "object). Without it, the TF_CONFIG environment variable is used.");
ABSL_FLAG(std::string, task, "",
          "This process's task, JOB:INDEX (e.g. ps:0). Without it, TF_CONFIG's \"task\".");

namespace psrt {

std::vector<char*> InitDaemon(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  return positional;
}

absl::StatusOr<TaskConfig> TaskConfigFromFlags() {
  return LoadTaskConfig(absl::GetFlag(FLAGS_cluster_spec), absl::GetFlag(FLAGS_task),
                        std::getenv("TF_CONFIG"));
}

int ExitWithError(const absl::Status& s) {
  LOG(ERROR) << s;
  std::cerr << "error: " << s.message() << std::endl;
  return 2;
}

}  // namespace psrt
