// Which variables move when a parameter server joins or leaves a running
// job (issue #14). Whole store-variables move (a variable, or one shard of
// a partitioned one, with its row slice or hash shard unchanged), so the
// workers' routing (shard order, HashShardOf) stays as it was and only
// the ps_task of a moved shard changes.
//
//   PsMovePlan p = *PlanPsJoin(placement, {0, 1}, 2);
//   for (const ShardMove& m : p.moves) ...  // copy m.variable from m.from to m.to
//   placement = p.placement;                // at the switch
#ifndef PSRT_COMMON_PLAN_PLACEMENT_MOVE_H_
#define PSRT_COMMON_PLAN_PLACEMENT_MOVE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/worker_service.pb.h"

namespace psrt {

struct ShardMove {
  std::string variable;  // its name (a store holds one shard of a variable at most)
  int from = 0;
  int to = 0;
};

struct PsMovePlan {
  PlacementMap placement;  // after the moves
  std::vector<ShardMove> moves;
};

// PS task `joining` (holding nothing) joins the PS tasks `live`: the
// variables on a single PS (hash tables and partitioned variables stay
// where they are) are placed again greedy by bytes (PlaceVariables) over
// live.size() + 1 PS; each of those PS's shares is matched to the live PS
// already holding most of its bytes, and the share left over is the
// joiner's: only its variables move. No move at all is a valid plan (one
// variable between two PS gives the joiner nothing).
absl::StatusOr<PsMovePlan> PlanPsJoin(const PlacementMap& placement, const std::vector<int>& live, int joining);

// PS task `leaving` (one of `live`) leaves: each shard on it goes, the
// largest first, to the least-loaded other live PS that holds no shard of
// the same variable. FAILED_PRECONDITION naming the variable when a shard
// has nowhere to go (a hash table or partitioned variable spread over
// every PS), or when no other PS is live.
absl::StatusOr<PsMovePlan> PlanPsLeave(const PlacementMap& placement, const std::vector<int>& live, int leaving);

}  // namespace psrt

#endif  // PSRT_COMMON_PLAN_PLACEMENT_MOVE_H_
