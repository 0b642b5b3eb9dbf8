#include "common/rpc/roles.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {
namespace {

constexpr uint8_t kChief = static_cast<uint8_t>(Role::kChief);
constexpr uint8_t kPs = static_cast<uint8_t>(Role::kPs);
constexpr uint8_t kWorker = static_cast<uint8_t>(Role::kWorker);
constexpr uint8_t kObserver = static_cast<uint8_t>(Role::kObserver);

struct RpcPolicy {
  Rpc rpc;
  const char* name;
  uint8_t allowed;
};

// The whole policy. A PS only ever calls the chief, and its backup's
// replica pushes; the chief pulls for
// evaluation; observers read status. Incarnations in JobStatus are shown
// to the chief only (see chief_service.cc).
constexpr RpcPolicy kPolicy[kRpcCount] = {
    {Rpc::kChiefRegister, "Chief/Register", kPs | kWorker},
    {Rpc::kChiefHeartbeat, "Chief/Heartbeat", kPs | kWorker},
    {Rpc::kChiefReportFailure, "Chief/ReportFailure", kPs | kWorker},
    {Rpc::kChiefJobStatus, "Chief/JobStatus", kChief | kObserver},
    {Rpc::kPsCreateVariables, "ParameterServer/CreateVariables", kChief},
    {Rpc::kPsPull, "ParameterServer/Pull", kChief | kWorker},
    {Rpc::kPsPullRows, "ParameterServer/PullRows", kChief | kWorker},
    {Rpc::kPsPush, "ParameterServer/Push", kWorker},
    {Rpc::kPsPushRows, "ParameterServer/PushRows", kWorker},
    {Rpc::kPsSnapshot, "ParameterServer/Snapshot", kChief},
    {Rpc::kPsRestore, "ParameterServer/Restore", kChief},
    {Rpc::kPsStatus, "ParameterServer/Status", kChief | kWorker | kObserver},
    {Rpc::kWorkerStart, "Worker/Start", kChief},
    {Rpc::kWorkerPause, "Worker/Pause", kChief},
    {Rpc::kWorkerResume, "Worker/Resume", kChief},
    {Rpc::kWorkerStatus, "Worker/Status", kChief | kObserver},
    {Rpc::kWorkerShutdown, "Worker/Shutdown", kChief},
    {Rpc::kPsReplicate, "ParameterServer/Push (replica)", kPs},
    {Rpc::kPsMoveVariables, "ParameterServer/MoveVariables", kChief},
    // A ticket for the TCP data plane carries the caller's roles: each
    // frame on it is then checked as its unary method would be (a PS's
    // only as a primary forwarding a push to its backup).
    {Rpc::kPsOpenDataPlane, "ParameterServer/OpenDataPlane", kChief | kWorker | kPs},
};

const RpcPolicy& PolicyOf(Rpc rpc) { return kPolicy[static_cast<int>(rpc)]; }

}  // namespace

absl::string_view RoleName(Role r) {
  switch (r) {
    case Role::kChief: return "chief";
    case Role::kPs: return "ps";
    case Role::kWorker: return "worker";
    case Role::kObserver: return "observer";
  }
  return "?";
}

std::optional<Role> RoleFromName(absl::string_view name) {
  for (Role r : {Role::kChief, Role::kPs, Role::kWorker, Role::kObserver}) {
    if (RoleName(r) == name) return r;
  }
  return std::nullopt;
}

absl::string_view RpcName(Rpc rpc) { return PolicyOf(rpc).name; }
uint8_t AllowedRoles(Rpc rpc) { return PolicyOf(rpc).allowed; }

bool Caller::MayActFor(absl::string_view job, int task_index) const {
  if (EveryRole()) return true;
  std::optional<Role> role = RoleFromName(job);
  if (!role.has_value() || *role == Role::kObserver || !Has(*role)) return false;
  return index < 0 || index == task_index;
}

std::string Caller::RolesText() const {
  if (EveryRole()) return "every role";
  std::vector<absl::string_view> names;
  for (Role r : {Role::kChief, Role::kPs, Role::kWorker, Role::kObserver}) {
    if (Has(r)) names.push_back(RoleName(r));
  }
  return names.empty() ? "no role" : absl::StrJoin(names, ", ");
}

Caller CallerFromCertificateName(absl::string_view cn) {
  Caller c;
  c.name = absl::StrCat("certificate ", cn);
  c.roles = kObserver;
  for (Role r : {Role::kChief, Role::kPs, Role::kWorker}) {
    absl::string_view job = RoleName(r);
    if (cn.substr(0, job.size()) != job) continue;
    absl::string_view rest = cn.substr(job.size());
    int index = -1;
    if (rest.empty() && r == Role::kChief) {
      index = 0;
    } else if (rest.size() < 2 || rest[0] != '-' || !absl::SimpleAtoi(rest.substr(1), &index) ||
               index < 0 || rest.substr(1) != absl::StrCat(index)) {
      continue;  // "ps-x", "worker-01", "psycho": not a task name
    }
    c.roles = static_cast<uint8_t>(r);
    c.index = index;
    break;
  }
  return c;
}

}  // namespace psrt
