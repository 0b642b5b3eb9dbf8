// FailoverRunner: the chief's side of replicated shards
// (job.replication.factor 2): a lost primary's backups promoted without a
// restore (failover.cc), and a PS that answers again made to hold its two
// copies again (rebuild.cc). The roles themselves are ChiefCluster's
// ReplicaRoles; each change of them is a new placement epoch.
#ifndef PSRT_CHIEF_FAILOVER_H_
#define PSRT_CHIEF_FAILOVER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chief/chief_cluster.h"
#include "chief/recovery.h"

namespace psrt {

class FailoverRunner {
 public:
  // `recovery`: the fallback when a store loses both copies.
  FailoverRunner(ChiefCluster* cluster, RecoveryRunner* recovery) : cluster_(*cluster), recovery_(recovery) {}

  // PS task `ps` is gone (`why`): its stores' backups are promoted at a new
  // epoch, workers paused, re-routed and resumed at their steps. When a
  // store loses both copies, falls back to Recover (the checkpoint).
  absl::Status Failover(int ps, const std::string& why);
  // A PS lost to a failover that answers again holds its copies again.
  // True when it ran one (the caller's pass is over).
  absl::StatusOr<bool> MaybeRebuild();

 private:
  // After a failover: each worker's step as it says now (a push of it may
  // have been applied and not acknowledged, and be pushed again); a
  // rebuild waits until every worker is past it (rebuild.cc).
  void NoteUnsettledSteps();
  // ABORTED: postponed (the workers did not all pause where a copy is
  // exact), nothing changed.
  absl::Status Rebuild(int ps);

  ChiefCluster& cluster_;
  RecoveryRunner* const recovery_;
  absl::Time next_rebuild_try_ = absl::InfinitePast();
  int rebuild_failures_ = 0;  // in a row
};

}  // namespace psrt

#endif  // PSRT_CHIEF_FAILOVER_H_
