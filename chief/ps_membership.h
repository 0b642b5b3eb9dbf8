// PsMembership: a parameter server joins or leaves a running job (up to
// failure.max_ps; ASYNC parameter-server jobs without replication). The
// chief moves whole variables (placement_move.h says which) to the joiner,
// or off the leaver, with a two-phase copy (ps_membership.cc).
#ifndef PSRT_CHIEF_PS_MEMBERSHIP_H_
#define PSRT_CHIEF_PS_MEMBERSHIP_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chief/chief_cluster.h"
#include "common/plan/placement_move.h"

namespace psrt {

class PsMembership {
 public:
  explicit PsMembership(ChiefCluster* cluster) : cluster_(*cluster) {}

  // A PS registered beyond the views joins, a live one that said it leaves
  // goes. Returns true when it moved variables (then the caller's pass is
  // over).
  absl::StatusOr<bool> Watch();

 private:
  std::vector<int> LivePs() const;
  // Moves `plan.moves` to the placement `plan.placement`: copies while
  // training goes on, then pauses the workers at a step boundary, fences
  // every PS at a new generation, copies again, switches and restarts the
  // workers. A failure before the switch puts everything back as it was.
  // `joining`/`leaving`: the PS that becomes live / stops being live (-1:
  // none).
  absl::Status MoveVariables(const PsMovePlan& plan, const std::string& why, int joining, int leaving);

  ChiefCluster& cluster_;
  // Variables a PS still holds after they moved off it (its drop failed):
  // dropped again at the next pass, so its snapshots hold no stale copy.
  std::map<int, std::vector<std::string>> pending_drops_;
  int moves_ = 0;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_PS_MEMBERSHIP_H_
