// NumPy broadcasting for the CPU and GPU kernels: the output shape of two
// inputs aligned at their last axes, and a plan that walks it with
// per-input strides (0 along an axis the input repeats).
//
// The plan coalesces: axes of size 1 go, and neighbouring axes that every
// input either holds whole or repeats merge into one, so a bias over NHWC
// channels ([N,H,W,C] + [C]) walks as [N*H*W, C] and the kernels see at
// most a few axes whatever the rank.
#ifndef PSRT_COMMON_COMPUTE_KERNELS_BROADCAST_H_
#define PSRT_COMMON_COMPUTE_KERNELS_BROADCAST_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"
#include "common/tensor.h"

namespace psrt {

// The broadcast shape of a and b; INVALID_ARGUMENT where an axis differs
// and neither is 1.
inline absl::Status BroadcastShape(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                   std::vector<int64_t>* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", TensorShape(a).ToString(), " and ",
                                                     TensorShape(b).ToString(), " do not broadcast"));
    }
    (*out)[i] = da == 1 ? db : da;
  }
  return absl::OkStatus();
}

// A walk over the (coalesced) output: dims, and for each input the step
// along each dim (0 where it repeats).
struct BroadcastPlan {
  std::vector<int64_t> out_shape;  // the real output shape
  std::vector<int64_t> dims;
  std::vector<int64_t> stride_a, stride_b;
  int64_t size = 1;  // output elements
};

// Plans a op b. An input may equal the output (its strides are dense).
inline absl::Status PlanBroadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b, BroadcastPlan* p) {
  if (absl::Status s = BroadcastShape(a, b, &p->out_shape); !s.ok()) return s;
  const size_t rank = p->out_shape.size();
  // Per kept axis: its size and whether a and b hold it whole.
  std::vector<int64_t> dims;
  std::vector<bool> full_a, full_b;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t d = p->out_shape[i];
    if (d == 1) continue;
    const bool fa = i >= rank - a.size() && a[i - (rank - a.size())] == d;
    const bool fb = i >= rank - b.size() && b[i - (rank - b.size())] == d;
    if (!dims.empty() && full_a.back() == fa && full_b.back() == fb) {
      dims.back() *= d;
    } else {
      dims.push_back(d);
      full_a.push_back(fa);
      full_b.push_back(fb);
    }
  }
  p->dims = dims;
  p->stride_a.assign(dims.size(), 0);
  p->stride_b.assign(dims.size(), 0);
  int64_t sa = 1, sb = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    if (full_a[i]) {
      p->stride_a[i] = sa;
      sa *= dims[i];
    }
    if (full_b[i]) {
      p->stride_b[i] = sb;
      sb *= dims[i];
    }
  }
  p->size = 1;
  for (int64_t d : p->out_shape) p->size *= d;
  return absl::OkStatus();
}

// `shape` with the given axes (of a rank-`rank` tensor, negative from the
// end) set to 1, or removed where !keep_dims; empty axes: all of them.
// INVALID_ARGUMENT for an axis out of range or repeated.
inline absl::Status ReducedShape(const std::vector<int64_t>& shape, const std::vector<int64_t>& axes, bool keep_dims,
                                 std::vector<int64_t>* out, std::vector<bool>* reduced = nullptr) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> r(shape.size(), axes.empty());
  for (int64_t a : axes) {
    const int64_t k = a < 0 ? a + rank : a;
    if (k < 0 || k >= rank || r[k]) return absl::InvalidArgumentError(absl::StrCat("axis ", a, " is out of range or repeated"));
    r[k] = true;
  }
  out->clear();
  for (int64_t i = 0; i < rank; ++i) {
    if (!r[i]) {
      out->push_back(shape[i]);
    } else if (keep_dims) {
      out->push_back(1);
    }
  }
  if (reduced != nullptr) *reduced = r;
  return absl::OkStatus();
}

// SumLike(dy, like): the axes of dy that `like` repeats when broadcast to
// it (every axis before like's rank, and those where like has 1).
// INVALID_ARGUMENT where dy is not a broadcast of like.
inline absl::Status SumLikeAxes(const TensorShape& dy, const TensorShape& like, std::vector<bool>* reduced) {
  std::vector<int64_t> out;
  if (absl::Status s = BroadcastShape(like.dims(), dy.dims(), &out); !s.ok() || out != dy.dims()) {
    return absl::InvalidArgumentError(absl::StrCat("dy ", dy.ToString(), " is not a broadcast of ", like.ToString()));
  }
  const size_t rank = dy.rank(), lr = like.rank();
  reduced->assign(rank, false);
  for (size_t i = 0; i < rank; ++i) (*reduced)[i] = i < rank - lr || like.dim(i - (rank - lr)) != dy.dim(i);
  return absl::OkStatus();
}

// BroadcastLike(dy, like) with the node's axes attr (the axes of like that
// a reduction without keep_dims took from dy): the plan from dy, given its
// reduced axes back as 1s, to like's shape.
inline absl::Status PlanBroadcastLike(const TensorShape& dy, const TensorShape& like, const std::vector<int64_t>& axes,
                                      BroadcastPlan* p) {
  std::vector<int64_t> dims = dy.dims();
  if (dy.rank() != like.rank()) {
    std::vector<int64_t> kept;
    if (absl::Status s = ReducedShape(like.dims(), axes, true, &dims); !s.ok()) return s;
    (void)ReducedShape(like.dims(), axes, false, &kept);
    if (kept != dy.dims()) {
      return absl::InvalidArgumentError(absl::StrCat("dy ", dy.ToString(), " does not match ", like.ToString()));
    }
  }
  if (absl::Status s = PlanBroadcast(dims, like.dims(), p); !s.ok() || p->out_shape != like.dims()) {
    return absl::InvalidArgumentError(absl::StrCat("dy ", dy.ToString(), " does not broadcast to ", like.ToString()));
  }
  return absl::OkStatus();
}

// BroadcastLike's factor: its scale attr, divided under `mean` by how many
// cells of like each dy element stands for.
inline float BroadcastLikeScale(const NodeDef& n, const Tensor& dy, const TensorShape& like) {
  float scale = GetAttrF(n, "scale", 1.0f);
  if (GetAttrB(n, "mean") && dy.NumElements() > 0) {
    scale *= static_cast<float>(dy.NumElements()) / static_cast<float>(std::max<int64_t>(1, like.num_elements()));
  }
  return scale;
}

// A ReduceSum / ReduceMean node on x: its output shape, the axes it
// reduces, and the factor (1, or one over the cells each output averages).
struct Reduction {
  std::vector<int64_t> out_shape;
  std::vector<bool> reduced;
  float scale = 1.0f;
};
inline absl::Status PlanReduction(const NodeDef& n, const TensorShape& x, bool mean, Reduction* r) {
  if (absl::Status s = ReducedShape(x.dims(), GetAttrInts(n, "axes"), GetAttrB(n, "keep_dims"), &r->out_shape, &r->reduced);
      !s.ok()) {
    return s;
  }
  int64_t out = 1;
  for (int64_t d : r->out_shape) out *= d;
  r->scale = mean ? static_cast<float>(out) / static_cast<float>(std::max<int64_t>(1, x.num_elements())) : 1.0f;
  return absl::OkStatus();
}

// `shape` reduced over the axes where `reduced`, coalesced: axes of size 1
// go and neighbours both reduced or both kept merge.
inline void CoalesceReduction(const std::vector<int64_t>& shape, const std::vector<bool>& reduced,
                              std::vector<int64_t>* dims, std::vector<bool>* red) {
  dims->clear();
  red->clear();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!dims->empty() && red->back() == reduced[i]) {
      dims->back() *= shape[i];
    } else {
      dims->push_back(shape[i]);
      red->push_back(reduced[i]);
    }
  }
}

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_KERNELS_BROADCAST_H_
