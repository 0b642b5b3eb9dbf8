#include "common/daemon.h"

#include <arpa/inet.h>
#include <signal.h>

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

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

std::string ListenAddressFor(const std::string& address) {
  size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  std::string port = address.substr(colon + 1);
  if (host == "localhost" || (host.size() > 2 && host.front() == '[')) return address;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return address;
  return "0.0.0.0:" + port;
}

}  // namespace psrt
