#include "common/plan/placement.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace psrt {

int64_t PlacementBytes(const VariableDef& v) {
  int64_t n = 4;
  for (int64_t d : v.shape().dim()) n *= std::max<int64_t>(d, 1);
  return n;
}

absl::StatusOr<PlacementMap> PlaceVariables(const std::vector<VariableDef>& variables, int num_ps,
                                            int64_t threshold) {
  if (num_ps < 1) return absl::InvalidArgumentError("placement needs at least one PS");
  std::vector<int64_t> bytes(variables.size());
  for (size_t i = 0; i < variables.size(); ++i) bytes[i] = PlacementBytes(variables[i]);
  std::vector<size_t> order(variables.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int64_t> load(num_ps, 0);
  std::vector<VariablePlacement> placed(variables.size());
  for (size_t i : order) {
    const VariableDef& v = variables[i];
    VariablePlacement& p = placed[i];
    *p.mutable_variable() = v;
    int64_t rows = v.shape().dim_size() > 0 ? v.shape().dim(0) : 1;
    bool hash = v.kind() == VariableDef::HASH_TABLE;
    bool split = num_ps > 1 && (hash || (bytes[i] > threshold && rows >= num_ps));
    if (!split) {
      int ps = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      VariablePlacement::Shard* s = p.add_shard();
      s->set_ps_task(ps);
      s->set_row_begin(0);
      s->set_row_end(rows);
      load[ps] += bytes[i];
      continue;
    }
    for (int ps = 0; ps < num_ps; ++ps) {
      VariablePlacement::Shard* s = p.add_shard();
      s->set_ps_task(ps);
      if (!hash) {
        s->set_row_begin(rows * ps / num_ps);
        s->set_row_end(rows * (ps + 1) / num_ps);
      }
      load[ps] += bytes[i] / num_ps;
    }
  }
  PlacementMap map;
  for (auto& p : placed) *map.add_variable() = std::move(p);
  return map;
}

void AssignBackups(PlacementMap* placement, int num_ps) {
  for (VariablePlacement& vp : *placement->mutable_variable()) {
    for (VariablePlacement::Shard& s : *vp.mutable_shard()) s.set_backup_ps_task((s.ps_task() + 1) % num_ps);
  }
}

std::vector<VariableDef> VariablesOnStore(const PlacementMap& placement, int store) {
  std::vector<VariableDef> out;
  for (const VariablePlacement& vp : placement.variable()) {
    for (int k = 0; k < vp.shard_size(); ++k) {
      const VariablePlacement::Shard& shard = vp.shard(k);
      if (shard.ps_task() != store) continue;
      VariableDef v = vp.variable();
      if (vp.shard_size() > 1 && v.kind() == VariableDef::HASH_TABLE) {
        v.set_hash_shard(k);
        v.set_hash_shards(vp.shard_size());
      } else if (vp.shard_size() > 1) {
        v.set_row_begin(shard.row_begin());
        v.set_row_end(shard.row_end());
      }
      out.push_back(std::move(v));
    }
  }
  return out;
}

}  // namespace psrt
