#include "worker/assignment_validator.h"

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/compute/gradient_clipping.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("assignment.", field, ": ", why));
}

// A node the step computes: present, and neither fed (a Placeholder, such
// as the label) nor a parameter (a Variable). `tensor` is "node" or
// "node:k", output k of a node with several (BatchNormGrad's dscale is
// "...:1").
absl::Status Computed(const std::map<std::string, std::string>& ops, const std::string& tensor,
                      absl::string_view field) {
  std::string node = tensor;
  const size_t colon = tensor.rfind(':');
  if (colon != std::string::npos && colon + 1 < tensor.size() && tensor.size() - colon <= 3 &&
      tensor.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    node = tensor.substr(0, colon);
  }
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
    // Store num_ps is a collective worker's own replica (mirrored: "PS 0").
    const int stores = limits.mirrored ? limits.num_ps + 1 : limits.num_ps;
    if (shard.ps_task() < 0 || shard.ps_task() >= stores) {
      return Bad(absl::StrCat(field, ".shard[", s, "].ps_task"),
                 absl::StrCat(shard.ps_task(), " is not a PS of this cluster (it has ", stores, ")"));
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

absl::Status CheckCollective(const CollectiveGroup& g, const AssignmentLimits& limits) {
  if (g.size() < 1 || g.size() > limits.max_shards) {
    return Bad("collective.size", absl::StrCat(g.size(), " is not in [1, ", limits.max_shards, "]"));
  }
  if (g.rank() < 0 || g.rank() >= g.size()) {
    return Bad("collective.rank", absl::StrCat(g.rank(), " is not in [0, ", g.size(), ")"));
  }
  if (g.peer_size() != g.size()) {
    return Bad("collective.peer", absl::StrCat(g.peer_size(), " peers for a group of ", g.size()));
  }
  for (int i = 0; i < g.peer_size(); ++i) {
    const std::string& p = g.peer(i);
    size_t colon = p.rfind(':');
    if (p.size() > 512 || colon == std::string::npos || colon == 0 || colon + 1 == p.size()) {
      return Bad(absl::StrCat("collective.peer[", i, "]"), "not host:port");
    }
  }
  if (g.timeout_ms() < 0) return Bad("collective.timeout_ms", "negative");
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAssignment(const WorkerAssignment& a, const AssignmentLimits& limits_in) {
  AssignmentLimits limits = limits_in;
  // PS that joined the running job beyond the worker's spec.
  limits.num_ps = static_cast<int>(PsAddresses(a, std::vector<std::string>(limits.num_ps, "spec")).size());
  if (a.has_collective()) {
    // The worker's policy first: no field of the group matters if it is refused.
    if (limits.refuse_plaintext_collective) {
      return Bad("collective", "under TLS the ring all-reduce would carry every gradient unencrypted (its "
                               "connections are authenticated, not encrypted) while the rest is encrypted: start "
                               "the workers with --allow_plaintext_collective if that is meant, or use the "
                               "parameter-server strategy (gRPC, encrypted)");
    }
    RETURN_IF_ERROR(CheckCollective(a.collective(), limits));
    limits.mirrored = true;
  }
  if (a.num_shards() < 1 || a.num_shards() > limits.max_shards) {
    return Bad("num_shards", absl::StrCat(a.num_shards(), " is not in [1, ", limits.max_shards, "]"));
  }
  if (a.shard_index() < 0 || a.shard_index() >= a.num_shards()) {
    return Bad("shard_index", absl::StrCat(a.shard_index(), " is not in [0, ", a.num_shards(), ")"));
  }
  std::set<int> streams;
  for (int i = 0; i < a.stream_size(); ++i) {
    const DataStream& d = a.stream(i);
    if (d.index() < 0 || d.index() >= a.num_shards() || d.start_batch() < 0 || !streams.insert(d.index()).second) {
      return Bad(absl::StrCat("stream[", i, "]"), absl::StrCat("stream ", d.index(), " from batch ", d.start_batch(),
                                                               ": not a stream of [0, ", a.num_shards(),
                                                               ") at a batch >= 0, or named twice"));
    }
  }
  if (a.start_step() < 0 || a.end_step() < a.start_step()) {
    return Bad("start_step", absl::StrCat("steps [", a.start_step(), ", ", a.end_step(), ") are not a range"));
  }
  if (a.input().batch_size() < 1 || a.input().batch_size() > limits.max_batch_size) {
    return Bad("input.batch_size", absl::StrCat(a.input().batch_size(), " is not in [1, ", limits.max_batch_size, "]"));
  }
  if (a.local_devices() < 0 || a.local_devices() > limits.max_local_devices) {
    return Bad("local_devices", absl::StrCat(a.local_devices(), " is not in [0, ", limits.max_local_devices, "]"));
  }
  RETURN_IF_ERROR(CheckClipping(a.clip(), "assignment.clip"));
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

std::vector<std::string> PsAddresses(const WorkerAssignment& a, std::vector<std::string> spec) {
  std::map<int, std::string> joined;
  for (const TaskInfo& t : a.ps()) {
    const std::string& addr = t.address();
    if (t.task().job() != "ps" || t.task().index() < static_cast<int>(spec.size()) || addr.empty() || addr.size() > 256 ||
        addr.find(':') == std::string::npos || addr.find_first_of(" \t\r\n/") != std::string::npos) {
      continue;
    }
    joined[t.task().index()] = addr;
  }
  for (auto it = joined.find(static_cast<int>(spec.size())); it != joined.end();
       it = joined.find(static_cast<int>(spec.size()))) {
    spec.push_back(it->second);
  }
  return spec;
}

}  // namespace psrt
