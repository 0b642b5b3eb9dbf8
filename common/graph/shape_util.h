// Small helpers for shape functions.
#ifndef PSRT_COMMON_GRAPH_SHAPE_UTIL_H_
#define PSRT_COMMON_GRAPH_SHAPE_UTIL_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/graph/op_registry.h"

namespace psrt {

// Two dims agree if equal or either is unknown.
inline bool DimsAgree(int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; }

inline bool ShapesAgree(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!DimsAgree(a[i], b[i])) return false;
  }
  return true;
}

inline absl::Status ShapeError(const NodeDef& n, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("node ", n.name(), " (", n.op(), "): ", what));
}

inline absl::Status RequireRank(const NodeDef& n, const Shape& s, size_t rank, absl::string_view which) {
  if (s.size() != rank) {
    return ShapeError(n, absl::StrCat(which, " must have rank ", rank, ", got ", ShapeString(s)));
  }
  return absl::OkStatus();
}

// Output size of a convolution or pooling window along one dim.
inline int64_t WindowOut(int64_t in, int64_t k, int64_t stride, bool same) {
  if (in < 0) return -1;
  return same ? (in + stride - 1) / stride : (in - k + stride) / stride;
}

// An op (typically a gradient op, not differentiated again) whose output is
// shaped like its input `like`.
inline OpDef ShapedLikeInput(const std::string& name, int num_inputs, int like) {
  OpDef d;
  d.name = name;
  d.num_inputs = num_inputs;
  d.shape = [like](const NodeDef&, const std::vector<Shape>& in, std::vector<Shape>* out) {
    *out = {in[like]};
    return absl::OkStatus();
  };
  return d;
}

// The gradients of y = op(a) x op(b), op a transpose (of the last two
// axes) where the node's flag attr says so: MatMul (transpose_a/_b) and
// BatchMatMul (adj_x/_y) share the table.
inline std::vector<std::string> ProductGrads(const GradContext& c, const std::string& op, const std::string& flag_a,
                                             const std::string& flag_b) {
  const bool ta = GetAttrB(*c.node, flag_a), tb = GetAttrB(*c.node, flag_b);
  auto mm = [&](const std::string& suffix, const std::string& x, const std::string& y, bool tx, bool ty) {
    Attrs attrs;
    if (tx) attrs[flag_a] = AttrB(true);
    if (ty) attrs[flag_b] = AttrB(true);
    return c.Add(op, suffix, {x, y}, attrs);
  };
  const std::string a = c.in(0), b = c.in(1), dy = c.dy[0];
  if (!ta && !tb) return {mm("da", dy, b, false, true), mm("db", a, dy, true, false)};
  if (!ta && tb) return {mm("da", dy, b, false, false), mm("db", dy, a, true, false)};
  if (ta && !tb) return {mm("da", b, dy, false, true), mm("db", a, dy, false, false)};
  return {mm("da", b, dy, true, true), mm("db", dy, a, true, true)};
}

}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_SHAPE_UTIL_H_
