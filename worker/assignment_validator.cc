#include "worker/assignment_validator.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("assignment.", field, ": ", why));
}

// A node the step computes: present, and neither fed (a Placeholder, such
// as the label) nor a parameter (a Variable).
absl::Status Computed(const std::map<std::string, std::string>& ops, const std::string& node,
                      absl::string_view field) {
  auto it = ops.find(node);
  if (it == ops.end()) return Bad(field, absl::StrCat("no node \"", node, "\" in the graph"));
  if (it->second == "Placeholder" || it->second == "Variable") {
    return Bad(field, absl::StrCat("\"", node, "\" is a ", it->second, ", not a computed value"));
  }
  return absl::OkStatus();
}

absl::Status CheckPlacement(const VariablePlacement& vp, int index, const std::map<std::string, std::string>& ops,
                            const AssignmentLimits& limits) {
  const std::string field = absl::StrCat("placement.variable[", index, "]");
  const VariableDef& v = vp.variable();
  auto it = ops.find(v.name());
  if (it == ops.end() || it->second != "Variable") {
    return Bad(field, absl::StrCat("\"", v.name(), "\" is not a Variable node of the graph"));
  }
  if (vp.shard_size() == 0) return Bad(field, absl::StrCat(v.name(), " has no shard"));
  const int64_t rows = v.shape().dim_size() > 0 ? v.shape().dim(0) : 1;
  for (int64_t d : v.shape().dim()) {
    if (d < 0) return Bad(field, absl::StrCat(v.name(), " has a negative dimension"));
  }
  const bool by_rows = vp.shard_size() > 1 && v.kind() != VariableDef::HASH_TABLE;
  if (by_rows && vp.shard_size() > rows) {
    return Bad(field, absl::StrCat(v.name(), " is split into ", vp.shard_size(), " shards but has ", rows, " rows"));
  }
  int64_t next_row = 0;
  for (int s = 0; s < vp.shard_size(); ++s) {
    const VariablePlacement::Shard& shard = vp.shard(s);
    if (shard.ps_task() < 0 || shard.ps_task() >= limits.num_ps) {
      return Bad(absl::StrCat(field, ".shard[", s, "].ps_task"),
                 absl::StrCat(shard.ps_task(), " is not a PS of this cluster (it has ", limits.num_ps, ")"));
    }
    if (!by_rows) continue;
    // Row shards tile [0, rows) in order: the client joins them by offset.
    if (shard.row_begin() != next_row || shard.row_end() <= shard.row_begin() || shard.row_end() > rows) {
      return Bad(absl::StrCat(field, ".shard[", s, "]"),
                 absl::StrCat("rows [", shard.row_begin(), ", ", shard.row_end(), ") of ", v.name(),
                              " do not follow row ", next_row, " within its ", rows, " rows"));
    }
    next_row = shard.row_end();
  }
  if (by_rows && next_row != rows) {
    return Bad(field, absl::StrCat("the shards of ", v.name(), " cover ", next_row, " of its ", rows, " rows"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAssignment(const WorkerAssignment& a, const AssignmentLimits& limits) {
  if (a.num_shards() < 1 || a.num_shards() > limits.max_shards) {
    return Bad("num_shards", absl::StrCat(a.num_shards(), " is not in [1, ", limits.max_shards, "]"));
  }
  if (a.shard_index() < 0 || a.shard_index() >= a.num_shards()) {
    return Bad("shard_index", absl::StrCat(a.shard_index(), " is not in [0, ", a.num_shards(), ")"));
  }
  if (a.start_step() < 0 || a.end_step() < a.start_step()) {
    return Bad("start_step", absl::StrCat("steps [", a.start_step(), ", ", a.end_step(), ") are not a range"));
  }
  if (a.input().batch_size() < 1 || a.input().batch_size() > limits.max_batch_size) {
    return Bad("input.batch_size", absl::StrCat(a.input().batch_size(), " is not in [1, ", limits.max_batch_size, "]"));
  }
  std::map<std::string, std::string> ops;
  for (const NodeDef& n : a.graph().node()) {
    if (!ops.emplace(n.name(), n.op()).second) return Bad("graph", absl::StrCat("node \"", n.name(), "\" twice"));
  }
  RETURN_IF_ERROR(Computed(ops, a.loss_node(), "loss_node"));
  for (int i = 0; i < a.metric_node_size(); ++i) {
    RETURN_IF_ERROR(Computed(ops, a.metric_node(i), absl::StrCat("metric_node[", i, "]")));
  }
  for (const auto& [variable, gradient] : a.gradient_node()) {
    auto it = ops.find(variable);
    if (it == ops.end() || it->second != "Variable") {
      return Bad("gradient_node", absl::StrCat("\"", variable, "\" is not a Variable node of the graph"));
    }
    RETURN_IF_ERROR(Computed(ops, gradient, absl::StrCat("gradient_node[", variable, "]")));
  }
  for (int i = 0; i < a.placement().variable_size(); ++i) {
    RETURN_IF_ERROR(CheckPlacement(a.placement().variable(i), i, ops, limits));
  }
  return absl::OkStatus();
}

}  // namespace psrt
