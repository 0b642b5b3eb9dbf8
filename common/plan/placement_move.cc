#include "common/plan/placement_move.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

// The bytes of one shard: its share of the rows, a hash shard its share.
int64_t ShardBytes(const VariablePlacement& vp, const VariablePlacement::Shard& s) {
  const int64_t whole = PlacementBytes(vp.variable());
  const int64_t rows = vp.variable().shape().dim_size() > 0 ? vp.variable().shape().dim(0) : 1;
  if (vp.variable().kind() == VariableDef::HASH_TABLE || rows <= 0) return whole / vp.shard_size();
  return whole / rows * std::max<int64_t>(0, s.row_end() - s.row_begin());
}

bool Movable(const VariablePlacement& vp) {
  return vp.shard_size() == 1 && vp.variable().kind() != VariableDef::HASH_TABLE;
}

}  // namespace

absl::StatusOr<PsMovePlan> PlanPsJoin(const PlacementMap& placement, const std::vector<int>& live, int joining) {
  if (live.empty()) return absl::FailedPreconditionError("a PS joins a job with no PS");
  if (std::find(live.begin(), live.end(), joining) != live.end()) {
    return absl::InvalidArgumentError(absl::StrCat("ps:", joining, " joins but is already one of the job's PS"));
  }
  PsMovePlan plan;
  plan.placement = placement;
  std::vector<VariableDef> defs;
  std::vector<int> index;  // into placement.variable()
  for (int i = 0; i < placement.variable_size(); ++i) {
    const VariablePlacement& vp = placement.variable(i);
    for (const VariablePlacement::Shard& s : vp.shard()) {
      if (s.ps_task() == joining) {
        return absl::InvalidArgumentError(absl::StrCat("ps:", joining, " joins but already holds ", vp.variable().name()));
      }
    }
    if (!Movable(vp)) continue;
    defs.push_back(vp.variable());
    index.push_back(i);
  }
  const int bins = static_cast<int>(live.size()) + 1;
  ASSIGN_OR_RETURN(PlacementMap greedy, PlaceVariables(defs, bins, /*partition_threshold_bytes=*/INT64_MAX));
  // overlap[bin][ps]: bytes of the bin's variables that ps holds now.
  std::vector<std::map<int, int64_t>> overlap(bins);
  for (int k = 0; k < greedy.variable_size(); ++k) {
    const int bin = greedy.variable(k).shard(0).ps_task();
    overlap[bin][placement.variable(index[k]).shard(0).ps_task()] += PlacementBytes(defs[k]);
  }
  // Match bins to live PS, the largest overlaps first; the bin no live PS
  // takes is the joiner's.
  std::vector<std::tuple<int64_t, int, int>> pairs;  // (-bytes, bin, ps)
  for (int b = 0; b < bins; ++b) {
    for (int ps : live) pairs.emplace_back(-(overlap[b].count(ps) ? overlap[b][ps] : 0), b, ps);
  }
  std::sort(pairs.begin(), pairs.end());
  std::set<int> bin_taken, ps_taken;
  for (const auto& [neg, b, ps] : pairs) {
    if (bin_taken.count(b) || ps_taken.count(ps)) continue;
    bin_taken.insert(b);
    ps_taken.insert(ps);
  }
  int joiner_bin = 0;
  while (bin_taken.count(joiner_bin)) ++joiner_bin;
  for (int k = 0; k < greedy.variable_size(); ++k) {
    if (greedy.variable(k).shard(0).ps_task() != joiner_bin) continue;
    VariablePlacement::Shard* s = plan.placement.mutable_variable(index[k])->mutable_shard(0);
    plan.moves.push_back({defs[k].name(), s->ps_task(), joining});
    s->set_ps_task(joining);
  }
  return plan;
}

absl::StatusOr<PsMovePlan> PlanPsLeave(const PlacementMap& placement, const std::vector<int>& live, int leaving) {
  std::vector<int> others;
  for (int ps : live) {
    if (ps != leaving) others.push_back(ps);
  }
  if (others.size() == live.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ps:", leaving, " leaves but is not one of the job's PS"));
  }
  if (others.empty()) return absl::FailedPreconditionError(absl::StrCat("ps:", leaving, " is the job's last PS"));
  PsMovePlan plan;
  plan.placement = placement;
  std::map<int, int64_t> load;
  for (int ps : others) load[ps] = 0;
  std::vector<std::pair<int64_t, int>> going;  // (-bytes, variable index)
  for (int i = 0; i < placement.variable_size(); ++i) {
    const VariablePlacement& vp = placement.variable(i);
    for (const VariablePlacement::Shard& s : vp.shard()) {
      if (s.ps_task() == leaving) {
        going.emplace_back(-ShardBytes(vp, s), i);
      } else if (load.count(s.ps_task())) {
        load[s.ps_task()] += ShardBytes(vp, s);
      }
    }
  }
  std::sort(going.begin(), going.end());
  for (const auto& [neg, i] : going) {
    VariablePlacement* vp = plan.placement.mutable_variable(i);
    std::set<int> holding;
    for (const VariablePlacement::Shard& s : vp->shard()) holding.insert(s.ps_task());
    int best = -1;
    for (int ps : others) {
      if (!holding.count(ps) && (best < 0 || load[ps] < load[best])) best = ps;
    }
    if (best < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("ps:", leaving, " cannot leave: its shard of ", vp->variable().name(),
                       " (partitioned or a hash table over every PS) has no other PS to go to; "
                       "restore the checkpoint onto fewer PS instead"));
    }
    for (VariablePlacement::Shard& s : *vp->mutable_shard()) {
      if (s.ps_task() == leaving) s.set_ps_task(best);
    }
    load[best] -= neg;
    plan.moves.push_back({vp->variable().name(), leaving, best});
  }
  return plan;
}

}  // namespace psrt
