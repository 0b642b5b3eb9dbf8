// Cluster spec: who runs where, from a JSON file or TensorFlow's TF_CONFIG.
//
// Both take TensorFlow's JSON: either the whole TF_CONFIG
//   {"cluster": {"chief": ["h:2222"], "ps": [...], "worker": [...]},
//    "task": {"type": "ps", "index": 0}}
// or just the "cluster" object. Jobs are chief (exactly one), ps and worker
// (at least one each) and evaluator (optional); each is a list of
// "host:port". Every error names the field and the source it came from.
//
//   ASSIGN_OR_RETURN(TaskConfig config,
//                    LoadTaskConfig(absl::GetFlag(FLAGS_cluster_spec),
//                                   absl::GetFlag(FLAGS_task), getenv("TF_CONFIG")));
//   LOG(INFO) << "serving " << TaskName(config.task) << " at " << config.address;
#ifndef PSRT_COMMON_CLUSTER_SPEC_H_
#define PSRT_COMMON_CLUSTER_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/cluster.pb.h"

namespace psrt {

inline constexpr absl::string_view kChiefJob = "chief";
inline constexpr absl::string_view kPsJob = "ps";
inline constexpr absl::string_view kWorkerJob = "worker";
inline constexpr absl::string_view kEvaluatorJob = "evaluator";

// "ps:0" (also "/job:ps/task:0"). Refuses unknown jobs and bad indices.
absl::StatusOr<TaskId> ParseTaskId(absl::string_view s);
std::string TaskName(const TaskId& task);  // "ps:0"
TaskId MakeTaskId(absl::string_view job, int index);

// Refuses an address that is not host:port with a port in 1..65535.
absl::Status ValidateAddress(absl::string_view address);

class ClusterSpec {
 public:
  ClusterSpec() = default;

  // `source` names where the text came from, for error messages.
  static absl::StatusOr<ClusterSpec> FromJson(absl::string_view json, absl::string_view source);
  static absl::StatusOr<ClusterSpec> FromJsonFile(const std::string& path);
  static absl::StatusOr<ClusterSpec> FromClusterDef(const ClusterDef& def,
                                                    absl::string_view source);

  const ClusterDef& def() const { return def_; }
  int NumTasks(absl::string_view job) const;
  absl::StatusOr<std::string> AddressOf(const TaskId& task) const;
  // Every task: chief, then ps, worker, evaluator, each by index.
  std::vector<TaskId> AllTasks() const;
  // TensorFlow's "cluster" JSON object.
  std::string ToJson() const;

 private:
  ClusterDef def_;  // jobs in the order chief, ps, worker, evaluator
};

// What a daemon needs to know about itself.
struct TaskConfig {
  ClusterSpec cluster;
  TaskId task;
  std::string address;  // from the spec
  // The job's name (--job_name; "" unless given), sent with the cluster
  // spec when the task registers: the chief refuses another job's tasks.
  std::string job_name;
};

// The cluster comes from `spec_path` if set, else from `tf_config` (the
// TF_CONFIG variable's text, may be null). The task comes from `task_flag`
// if set, else the spec file's or TF_CONFIG's "task". Errors say which of
// the three was missing or wrong.
absl::StatusOr<TaskConfig> LoadTaskConfig(const std::string& spec_path,
                                          const std::string& task_flag,
                                          const char* tf_config);

}  // namespace psrt

#endif  // PSRT_COMMON_CLUSTER_SPEC_H_
