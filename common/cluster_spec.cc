#include "common/cluster_spec.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace psrt {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

const std::vector<absl::string_view>& KnownJobs() {
  static const auto* jobs = new std::vector<absl::string_view>{
      kChiefJob, kPsJob, kWorkerJob, kEvaluatorJob};
  return *jobs;
}

// Kubeflow's TFJob (and TensorFlow 1.x's estimators) call the chief
// "master": the same task.
constexpr absl::string_view kMasterJob = "master";

// `job`, with "master" read as "chief".
std::string CanonicalJob(absl::string_view job) {
  return std::string(job == kMasterJob ? kChiefJob : job);
}

bool IsKnownJob(absl::string_view job) {
  for (absl::string_view j : KnownJobs()) {
    if (j == job) return true;
  }
  return false;
}

absl::Status Invalid(absl::string_view source, absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, ": ", what));
}

absl::StatusOr<Struct> ParseJson(absl::string_view json, absl::string_view source) {
  Struct s;
  auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &s);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a JSON object: ", status.message().as_string()));
  }
  return s;
}

absl::StatusOr<ClusterDef> ClusterFromStruct(const Struct& cluster, absl::string_view source,
                                             absl::string_view prefix) {
  ClusterDef def;
  const bool has_master = cluster.fields().count(std::string(kMasterJob)) > 0;
  if (has_master && cluster.fields().count(std::string(kChiefJob))) {
    return Invalid(source, absl::StrCat(prefix, kMasterJob),
                   "both \"chief\" and \"master\" (Kubeflow's name for the chief): a cluster has one chief, "
                   "keep one of them");
  }
  for (absl::string_view job : KnownJobs()) {
    // A "master" list is the chief's (and named so in messages).
    const absl::string_view key = job == kChiefJob && has_master ? kMasterJob : job;
    auto it = cluster.fields().find(std::string(key));
    if (it == cluster.fields().end()) continue;
    std::string field = absl::StrCat(prefix, key);
    if (it->second.kind_case() != Value::kListValue) {
      return Invalid(source, field, "must be a list of \"host:port\" strings");
    }
    ClusterJob* j = def.add_job();
    j->set_name(std::string(job));
    const auto& list = it->second.list_value().values();
    for (int i = 0; i < list.size(); ++i) {
      std::string f = absl::StrCat(field, "[", i, "]");
      if (list[i].kind_case() != Value::kStringValue) {
        return Invalid(source, f, "must be a \"host:port\" string");
      }
      j->add_address(list[i].string_value());
    }
  }
  for (const auto& [name, value] : cluster.fields()) {
    if (!IsKnownJob(CanonicalJob(name))) {
      return Invalid(source, absl::StrCat(prefix, name),
                     absl::StrCat("unknown job (expected one of ",
                                  absl::StrJoin(KnownJobs(), ", "), "; master means chief)"));
    }
  }
  return def;
}

absl::StatusOr<TaskId> TaskFromStruct(const Struct& task, absl::string_view source) {
  auto type = task.fields().find("type");
  if (type == task.fields().end() || type->second.kind_case() != Value::kStringValue) {
    return Invalid(source, "task.type", "missing or not a string");
  }
  const std::string job = CanonicalJob(type->second.string_value());
  if (!IsKnownJob(job)) {
    return Invalid(source, "task.type",
                   absl::StrCat("unknown job \"", type->second.string_value(), "\" (expected one of ",
                                absl::StrJoin(KnownJobs(), ", "), "; master means chief)"));
  }
  int index = 0;
  auto idx = task.fields().find("index");
  if (idx != task.fields().end()) {
    double v = idx->second.number_value();
    // The range check comes before the cast: casting 1e300 to int is UB.
    if (idx->second.kind_case() != Value::kNumberValue || !(v >= 0 && v <= INT_MAX) ||
        v != std::floor(v)) {
      return Invalid(source, "task.index", "must be a non-negative integer");
    }
    index = static_cast<int>(v);
  }
  return MakeTaskId(job, index);
}

struct ParsedConfig {
  ClusterSpec cluster;
  std::optional<TaskId> task;
};

absl::StatusOr<ParsedConfig> ParseConfig(absl::string_view json, absl::string_view source) {
  ASSIGN_OR_RETURN(Struct top, ParseJson(json, source));
  ParsedConfig out;
  if (top.fields().count("sparseCluster")) {
    // Kubeflow's enableDynamicWorker: each worker is told only its own
    // address. The chief needs every task's, and the other tasks need the
    // chief's, so there is no psrt cluster in it.
    return Invalid(source, "sparseCluster",
                   "not supported: psrt needs every task's address. Give a \"cluster\" instead (Kubeflow: "
                   "leave the TFJob's enableDynamicWorker off) or --cluster_spec=FILE; for workers that join "
                   "a running job, set job.failure.max_workers and give each joiner a spec that names it "
                   "(deploy/DEPLOYMENT.md, elastic workers)");
  }
  auto cluster = top.fields().find("cluster");
  if (cluster == top.fields().end()) {
    // A bare cluster object, unless it looks like a TF_CONFIG missing "cluster".
    if (top.fields().count("task")) return Invalid(source, "cluster", "missing");
    ASSIGN_OR_RETURN(ClusterDef def, ClusterFromStruct(top, source, ""));
    ASSIGN_OR_RETURN(out.cluster, ClusterSpec::FromClusterDef(def, source));
    return out;
  }
  if (cluster->second.kind_case() != Value::kStructValue) {
    return Invalid(source, "cluster", "must be an object of job -> address list");
  }
  ASSIGN_OR_RETURN(ClusterDef def, ClusterFromStruct(cluster->second.struct_value(), source,
                                                     "cluster."));
  ASSIGN_OR_RETURN(out.cluster, ClusterSpec::FromClusterDef(def, source));
  auto task = top.fields().find("task");
  if (task != top.fields().end()) {
    if (task->second.kind_case() != Value::kStructValue) {
      return Invalid(source, "task", "must be an object {\"type\": ..., \"index\": ...}");
    }
    ASSIGN_OR_RETURN(out.task, TaskFromStruct(task->second.struct_value(), source));
  }
  for (const auto& [key, value] : top.fields()) {
    if (key != "cluster" && key != "task" && key != "environment" && key != "rpc_layer") {
      return Invalid(source, key, "unknown key (expected cluster, task, environment, rpc_layer)");
    }
  }
  return out;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open cluster spec ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TaskId MakeTaskId(absl::string_view job, int index) {
  TaskId t;
  t.set_job(std::string(job));
  t.set_index(index);
  return t;
}

std::string TaskName(const TaskId& task) { return absl::StrCat(task.job(), ":", task.index()); }

absl::StatusOr<TaskId> ParseTaskId(absl::string_view s) {
  std::string job;
  std::string index;
  if (absl::StartsWith(s, "/job:")) {  // TensorFlow's "/job:ps/task:0"
    std::vector<std::string> parts = absl::StrSplit(s.substr(5), "/task:");
    if (parts.size() == 2) {
      job = parts[0];
      index = parts[1];
    }
  } else {
    std::vector<std::string> parts = absl::StrSplit(s, ':');
    if (parts.size() == 2) {
      job = parts[0];
      index = parts[1];
    }
  }
  int i;
  if (job.empty() || !absl::SimpleAtoi(index, &i) || i < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", s, "\": expected JOB:INDEX such as ps:0"));
  }
  if (!IsKnownJob(CanonicalJob(job))) {
    return absl::InvalidArgumentError(absl::StrCat("task \"", s, "\": unknown job \"", job,
                                                   "\" (expected one of ",
                                                   absl::StrJoin(KnownJobs(), ", "), "; master means chief)"));
  }
  return MakeTaskId(CanonicalJob(job), i);
}

absl::Status ValidateAddress(absl::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has no :port"));
  }
  absl::string_view host = address.substr(0, colon);
  absl::string_view port = address.substr(colon + 1);
  if (absl::StartsWith(host, "[") != absl::EndsWith(host, "]") ||
      (!absl::StartsWith(host, "[") && absl::StrContains(host, ':'))) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\": IPv6 hosts go in brackets, [::1]:port"));
  }
  if (host.empty() || host == "[]") {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has no host"));
  }
  for (char c : host) {
    if (c == ' ' || c == '/' || c == '\t') {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", address, "\": bad character in host"));
    }
  }
  int p;
  if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\": port must be 1..65535"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromClusterDef(const ClusterDef& def,
                                                        absl::string_view source) {
  std::map<std::string, const ClusterJob*> jobs;
  std::map<std::string, std::string> seen;  // address -> task
  for (const ClusterJob& job : def.job()) {
    if (!IsKnownJob(job.name())) {
      return Invalid(source, job.name(), "unknown job");
    }
    if (!jobs.emplace(job.name(), &job).second) {
      return Invalid(source, job.name(), "job listed twice");
    }
    for (int i = 0; i < job.address_size(); ++i) {
      std::string field = absl::StrCat(job.name(), "[", i, "]");
      absl::Status s = ValidateAddress(job.address(i));
      if (!s.ok()) return Invalid(source, field, s.message());
      auto [it, inserted] = seen.emplace(job.address(i), field);
      if (!inserted) {
        return Invalid(source, field,
                       absl::StrCat("duplicate address ", job.address(i), " (also ", it->second, ")"));
      }
    }
  }
  auto count = [&](absl::string_view name) {
    auto it = jobs.find(std::string(name));
    return it == jobs.end() ? 0 : it->second->address_size();
  };
  if (count(kChiefJob) != 1) {
    return Invalid(source, "chief",
                   count(kChiefJob) == 0 ? "missing (a cluster needs exactly one chief)"
                                         : "a cluster has exactly one chief");
  }
  // No ps is a cluster of a mirrored strategy; the chief checks the job's
  // strategy against the tasks it has.
  if (count(kWorkerJob) == 0) return Invalid(source, "worker", "missing (at least one worker)");
  ClusterSpec spec;
  for (absl::string_view name : KnownJobs()) {
    auto it = jobs.find(std::string(name));
    if (it != jobs.end()) *spec.def_.add_job() = *it->second;
  }
  return spec;
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJson(absl::string_view json,
                                                  absl::string_view source) {
  ASSIGN_OR_RETURN(ParsedConfig parsed, ParseConfig(json, source));
  return parsed.cluster;
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return FromJson(text, path);
}

int ClusterSpec::NumTasks(absl::string_view job) const {
  for (const ClusterJob& j : def_.job()) {
    if (j.name() == job) return j.address_size();
  }
  return 0;
}

absl::StatusOr<std::string> ClusterSpec::AddressOf(const TaskId& task) const {
  for (const ClusterJob& j : def_.job()) {
    if (j.name() != task.job()) continue;
    if (task.index() < 0 || task.index() >= j.address_size()) {
      return absl::InvalidArgumentError(absl::StrCat("task ", TaskName(task), ": index out of range (job ",
                                                     j.name(), " has ", j.address_size(), " tasks)"));
    }
    return j.address(task.index());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("task ", TaskName(task), ": the cluster has no job \"", task.job(), "\""));
}

std::vector<TaskId> ClusterSpec::AllTasks() const {
  std::vector<TaskId> out;
  for (const ClusterJob& j : def_.job()) {
    for (int i = 0; i < j.address_size(); ++i) out.push_back(MakeTaskId(j.name(), i));
  }
  return out;
}

std::string ClusterSpec::ToJson() const {
  std::vector<std::string> jobs;
  for (const ClusterJob& j : def_.job()) {
    std::vector<std::string> addrs;
    // Addresses are checked only loosely (a host may hold a quote), and
    // every task the chief launches parses this again: escape them.
    for (const auto& a : j.address()) addrs.push_back(JsonString(a));
    jobs.push_back(absl::StrCat(JsonString(j.name()), ": [", absl::StrJoin(addrs, ", "), "]"));
  }
  return absl::StrCat("{", absl::StrJoin(jobs, ", "), "}");
}

absl::StatusOr<TaskConfig> LoadTaskConfig(const std::string& spec_path,
                                          const std::string& task_flag, const char* tf_config) {
  std::optional<ParsedConfig> from_env;
  if (tf_config != nullptr && *tf_config != '\0') {
    ASSIGN_OR_RETURN(from_env, ParseConfig(tf_config, "TF_CONFIG"));
  }
  TaskConfig config;
  std::optional<TaskId> task;
  if (!spec_path.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(spec_path));
    ASSIGN_OR_RETURN(ParsedConfig parsed, ParseConfig(text, spec_path));
    config.cluster = parsed.cluster;
    task = parsed.task;
  } else if (from_env.has_value()) {
    config.cluster = from_env->cluster;
  } else {
    return absl::InvalidArgumentError(
        "no cluster spec: pass --cluster_spec=FILE or set TF_CONFIG");
  }
  if (!task_flag.empty()) {
    ASSIGN_OR_RETURN(task, ParseTaskId(task_flag));
  } else if (!task.has_value() && from_env.has_value()) {
    task = from_env->task;
  }
  if (!task.has_value()) {
    return absl::InvalidArgumentError(
        "no task: pass --task=JOB:INDEX (e.g. ps:0) or set TF_CONFIG's \"task\"");
  }
  config.task = *task;
  ASSIGN_OR_RETURN(config.address, config.cluster.AddressOf(config.task));
  return config;
}

}  // namespace psrt
