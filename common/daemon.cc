#include "common/daemon.h"

#include <arpa/inet.h>
#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/protobuf_log_limit.h"
#include "common/exit_codes.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, cluster_spec, "",
          "Cluster spec JSON file (TensorFlow's TF_CONFIG format, or just its \"cluster\" "
          "object). Without it, the TF_CONFIG environment variable is used.");
ABSL_FLAG(std::string, task, "",
          "This process's task, JOB:INDEX (e.g. ps:0). Without it, TF_CONFIG's \"task\".");

ABSL_FLAG(std::string, job_name, "",
          "Name of the job this task belongs to; the chief refuses a PS or worker whose --job_name or cluster "
          "spec is not its own (\"\" = unnamed: the spec alone is compared).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of the cluster's CA. With --tls_cert and --tls_key: mutual TLS on every "
          "connection this process serves or opens (peers need certificates from this CA).");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate (chain) of this task, signed by --tls_ca.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to expect in peers' certificates when it is not the host in their address.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File whose first line is the cluster's shared token: every call must carry it "
          "(UNAUTHENTICATED otherwise). For clusters without a PKI; combine with TLS off loopback.");
ABSL_FLAG(int32_t, max_concurrent_streams, 256,
          "Most concurrent calls one client connection may have open (0 = gRPC's default).");
ABSL_FLAG(int64_t, max_server_memory_mb, -1,
          "Memory gRPC may use for calls in flight on this process's port, in MiB; above it calls are refused "
          "(RESOURCE_EXHAUSTED) instead of growing the process (-1 = four times the largest message accepted, at "
          "least 256; 0 = unlimited).");
ABSL_FLAG(int64_t, max_receive_message_mb, 64,
          "Largest message the chief or a worker accepts on its gRPC port, in MiB (RESOURCE_EXHAUSTED above): "
          "gRPC receives a message whole before the token is checked. A worker's largest are its Start (the job's "
          "compute graph) and, under mirrored strategies, its replica's initial values (an imported model's "
          "weights). A PS takes --max_request_mb instead.");

namespace psrt {

const char* DaemonFlagsFile() { return __FILE__; }

std::vector<char*> InitDaemon(int argc, char** argv, const char* usage, const HelpFlags& help) {
  HandleHelp(argc, argv, usage, help);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  LimitProtobufLogs();  // a line per refused request would be a log flood
  // Debian's Abseil is built without NDEBUG, so by default every
  // Mutex::Lock also records the lock order in one process-wide graph
  // (deadlock detection): a global lock taken on every lock, 1-2% of a
  // training cluster's CPU in a profile of the data path. Daemons turn it
  // off; tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  RaiseDescriptorLimit();
  return positional;
}

void RaiseDescriptorLimit() {
  // The soft limit is often 1,024 while the hard one is far higher: a PS
  // with that many connections open (workers, or a crowd of strangers)
  // left gRPC unable to accept for good ("Too many open files").
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  const rlim_t before = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
    VLOG(1) << "descriptor limit raised from " << before << " to " << lim.rlim_cur;
  } else {
    LOG(WARNING) << "cannot raise the descriptor limit from " << before << ": " << std::strerror(errno);
  }
}

absl::StatusOr<TaskConfig> TaskConfigFromFlags() {
  absl::StatusOr<TaskConfig> config =
      LoadTaskConfig(absl::GetFlag(FLAGS_cluster_spec), absl::GetFlag(FLAGS_task), std::getenv("TF_CONFIG"));
  if (config.ok()) config->job_name = absl::GetFlag(FLAGS_job_name);
  return config;
}

absl::StatusOr<RpcOptions> RpcOptionsFromFlags() {
  SecurityPaths paths;
  paths.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  paths.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  paths.tls_key = absl::GetFlag(FLAGS_tls_key);
  paths.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  paths.token_file = absl::GetFlag(FLAGS_auth_token_file);
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(paths);
  if (!security.ok()) return security.status();
  RpcOptions rpc;
  rpc.security = *std::move(security);
  int32_t streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  int64_t memory_mb = absl::GetFlag(FLAGS_max_server_memory_mb);
  int64_t receive_mb = absl::GetFlag(FLAGS_max_receive_message_mb);
  if (streams < 0) return absl::InvalidArgumentError("--max_concurrent_streams must be >= 0");
  if (memory_mb < -1 || memory_mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--max_server_memory_mb=", memory_mb, ": want -1 to 1073741824"));
  }
  if (receive_mb < 1 || receive_mb > 2047) {
    return absl::InvalidArgumentError(absl::StrCat("--max_receive_message_mb=", receive_mb, ": want 1 to 2047"));
  }
  rpc.max_concurrent_streams = streams;
  rpc.max_server_memory_bytes = memory_mb < 0 ? -1 : memory_mb << 20;
  rpc.max_receive_message_bytes = static_cast<int>(receive_mb << 20);
  return rpc;
}

int ExitWithError(const absl::Status& s) {
  LOG(ERROR) << s;
  std::cerr << "error: " << s.message() << std::endl;
  return kExitError;
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

std::string UserPath(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || cwd == nullptr) return path;
  return absl::StrCat(cwd, "/", path);
}

}  // namespace psrt
