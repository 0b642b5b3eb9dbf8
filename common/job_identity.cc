#include "common/job_identity.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace psrt {
namespace {

std::map<std::string, std::vector<std::string>> ByJob(const ClusterDef& def) {
  std::map<std::string, std::vector<std::string>> jobs;
  for (const ClusterJob& j : def.job()) {
    auto& addresses = jobs[j.name()];
    addresses.insert(addresses.end(), j.address().begin(), j.address().end());
  }
  return jobs;
}

// A peer's words in a message: printable and bounded.
std::string Shown(const std::string& text) {
  constexpr size_t kMax = 128;
  return absl::StrCat(absl::CHexEscape(text.substr(0, kMax)), text.size() > kMax ? "..." : "");
}

std::string Named(const std::string& job_name) {
  return job_name.empty() ? "an unnamed job (no --job_name)" : absl::StrCat("job '", Shown(job_name), "'");
}

}  // namespace

JobIdentity MakeJobIdentity(const std::string& job_name, const ClusterSpec& cluster) {
  JobIdentity id;
  id.set_name(job_name);
  *id.mutable_cluster() = cluster.def();
  return id;
}

std::string ClusterDigest(const ClusterDef& cluster) {
  // The JSON of a spec rebuilt from the def, so the same tasks in the same
  // order give the same digest whichever file or TF_CONFIG they came from.
  std::string text;
  for (const auto& [job, addresses] : ByJob(cluster)) {
    absl::StrAppend(&text, job, "=");
    for (const std::string& a : addresses) absl::StrAppend(&text, a, ",");
    absl::StrAppend(&text, ";");
  }
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

absl::Status CheckSameJob(const JobIdentity& chief_identity, const JobIdentity& task_identity, const TaskId& task) {
  const std::string who = Shown(TaskName(task));
  if (chief_identity.name() != task_identity.name()) {
    return absl::PermissionDeniedError(absl::StrCat(
        who, " belongs to ", Named(task_identity.name()), ", but this chief runs ", Named(chief_identity.name()),
        ": start every task of a job with the same --job_name"));
  }
  const auto mine = ByJob(chief_identity.cluster());
  const auto theirs = ByJob(task_identity.cluster());
  for (const auto& [job, addresses] : mine) {
    auto it = theirs.find(job);
    const size_t common = it == theirs.end() ? 0 : std::min(addresses.size(), it->second.size());
    // The chief's address must be in both: it is the one the task dialled.
    if (job == kChiefJob && common == 0) {
      return absl::PermissionDeniedError(absl::StrCat(who, "'s cluster spec names no chief"));
    }
    for (size_t i = 0; i < common; ++i) {
      if (addresses[i] == it->second[i]) continue;
      return absl::PermissionDeniedError(absl::StrCat(
          who, " belongs to another cluster: its cluster spec (digest ", ClusterDigest(task_identity.cluster()),
          ") has ", job, ":", i, " at ", Shown(it->second[i]), ", this chief's (digest ", ClusterDigest(chief_identity.cluster()),
          ") has ", job, ":", i, " at ", addresses[i],
          ": give every task of a job the chief's cluster spec (a joiner's may name more tasks)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace psrt
