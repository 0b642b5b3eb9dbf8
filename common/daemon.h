// Process start-up shared by the daemons: flags, logging, task identity.
//
// Flags and TF_CONFIG are read here, in main, and passed down as options;
// nothing deeper reads the environment.
//
//   int main(int argc, char** argv) {
//     psrt::InitDaemon(argc, argv, "Parameter server. Usage: ...");
//     absl::StatusOr<psrt::TaskConfig> config = psrt::TaskConfigFromFlags();
//     if (!config.ok()) return psrt::ExitWithError(config.status());
//     ...
//   }
#ifndef PSRT_COMMON_DAEMON_H_
#define PSRT_COMMON_DAEMON_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cluster_spec.h"
#include "common/flags_help.h"
#include "common/rpc/channel_cache.h"

ABSL_DECLARE_FLAG(std::string, cluster_spec);
ABSL_DECLARE_FLAG(std::string, task);

namespace psrt {

// Parses flags (absl), sends glog output to stderr, installs the crash
// handler. Returns the positional arguments (argv[0] first). --help prints
// `usage` and the flags of `help`, one line each, and exits 0
// (flags_help.h).
std::vector<char*> InitDaemon(int argc, char** argv, const char* usage, const HelpFlags& help);
// The file that defines the flags above (--cluster_spec, --task,
// --job_name, TLS and gRPC limits), for HelpFlags.
const char* DaemonFlagsFile();
// Raises this process's soft limit on open descriptors to its hard limit
// (InitDaemon does, for every daemon).
void RaiseDescriptorLimit();

// --cluster_spec / --task, falling back to the TF_CONFIG variable, and
// --job_name.
absl::StatusOr<TaskConfig> TaskConfigFromFlags();

// RpcOptions from the transport flags every daemon shares: --tls_ca,
// --tls_cert, --tls_key, --tls_server_name, --auth_token_file,
// --max_concurrent_streams, --max_server_memory_mb, --max_receive_message_mb.
// Errors name the flag.
absl::StatusOr<RpcOptions> RpcOptionsFromFlags();

// Logs `s` as the reason the process stops; returns kExitError (2,
// common/exit_codes.h).
int ExitWithError(const absl::Status& s);

// Blocks SIGINT and SIGTERM in this thread and every thread started after
// it; WaitForTerminationSignal then takes them synchronously. Call first in
// main.
void BlockTerminationSignals();
// Blocks until SIGINT or SIGTERM arrives; returns the signal.
int WaitForTerminationSignal();

// Where to listen for a spec address: as is for localhost and IP literals,
// else every interface on its port (a hostname such as a Kubernetes
// service name may not be bindable inside the pod).
std::string ListenAddressFor(const std::string& address);

// A path from the command line: relative ones are taken from the directory
// `bazel run` was started in (BUILD_WORKING_DIRECTORY), not the runfiles
// tree it runs the binary in. Empty and absolute paths come back as given.
std::string UserPath(const std::string& path);

}  // namespace psrt

#endif  // PSRT_COMMON_DAEMON_H_
