// Who may call what: the roles of a psrt cluster and the methods each may
// call. The transport (security.h) tells who a caller is; this file says
// what that caller may do, in one table (kPolicy in roles.cc).
//
//   chief     drives the job: CreateVariables/Snapshot/Restore on the PS,
//             Start/Pause/Resume/Shutdown on the workers, pulls (evaluation)
//   worker    pulls and pushes; registers, heartbeats, reports failures
//   ps        talks to the chief only: Register, Heartbeat, ReportFailure
//   observer  any other identity the cluster trusts (an operator's tool):
//             the read-only Status methods and JobStatus
//
// A caller the transport cannot tell apart (plain text, or the legacy single
// shared token) holds every role: there is nothing to separate roles by.
#ifndef PSRT_COMMON_RPC_ROLES_H_
#define PSRT_COMMON_RPC_ROLES_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace psrt {

enum class Role : uint8_t { kChief = 1, kPs = 2, kWorker = 4, kObserver = 8 };
inline constexpr uint8_t kEveryRole = 1 | 2 | 4 | 8;

absl::string_view RoleName(Role r);  // "chief", "ps", "worker", "observer"
std::optional<Role> RoleFromName(absl::string_view name);

// The methods of the three services, and kPsReplicate: a Push a
// primary PS forwards to its backup (job.replication; it travels as a Push
// marked psrt-replica in its metadata).
enum class Rpc {
  kChiefRegister, kChiefHeartbeat, kChiefReportFailure, kChiefJobStatus,
  kPsCreateVariables, kPsPull, kPsPullRows, kPsPush, kPsPushRows, kPsSnapshot, kPsRestore, kPsStatus,
  kWorkerStart, kWorkerPause, kWorkerResume, kWorkerStatus, kWorkerShutdown, kPsReplicate, kPsMoveVariables,
  kPsOpenDataPlane,
};
inline constexpr int kRpcCount = 20;

absl::string_view RpcName(Rpc rpc);  // "ParameterServer/Restore"
// The roles allowed to call `rpc` (a mask of Role values).
uint8_t AllowedRoles(Rpc rpc);

// Who made a call, as far as the transport can tell.
struct Caller {
  uint8_t roles = kEveryRole;  // a mask of Role values
  int index = -1;              // task index (certificate or per-task token); -1: any of the role
  std::string name;            // for messages: "certificate worker-0", "worker token"

  bool Has(Role r) const { return (roles & static_cast<uint8_t>(r)) != 0; }
  bool EveryRole() const { return roles == kEveryRole; }
  // Whether this caller may speak for task `index` of `job` ("ps", "worker",
  // "chief"): its role is that job's and its index, if known, is that one.
  bool MayActFor(absl::string_view job, int index) const;
  // "worker" or "worker, ps"; "every role".
  std::string RolesText() const;
};

// The identity a certificate's common name gives: "chief" or "chief-N",
// "ps-N", "worker-N" (as deploy/make_certs.sh names them); any other name
// is an observer.
Caller CallerFromCertificateName(absl::string_view common_name);

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_ROLES_H_
