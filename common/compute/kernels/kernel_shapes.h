// Run-time shape logic shared by the CPU and GPU kernels, so both devices
// accept the same inputs and lay out results alike: matrix-product sizes,
// concat axes, and the window geometry of Conv2D and MaxPool (NHWC, square
// k x k window, stride, SAME or VALID padding).
#ifndef PSRT_COMMON_COMPUTE_KERNELS_KERNEL_SHAPES_H_
#define PSRT_COMMON_COMPUTE_KERNELS_KERNEL_SHAPES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"
#include "common/compute/kernels/kernel.h"

namespace psrt {

// MatMul of a and b with the node's transpose_a/transpose_b attrs: the
// result is [m, n] with inner size k.
struct MatMulDims {
  bool ta, tb;
  int64_t m, k, n;
};
inline absl::Status MatMulShape(const KernelContext& c, const TensorShape& a, const TensorShape& b,
                                MatMulDims* d) {
  if (a.rank() != 2 || b.rank() != 2) return c.Error("inputs must be matrices");
  d->ta = GetAttrB(*c.node, "transpose_a");
  d->tb = GetAttrB(*c.node, "transpose_b");
  d->m = a.dim(d->ta ? 1 : 0);
  d->k = a.dim(d->ta ? 0 : 1);
  d->n = b.dim(d->tb ? 0 : 1);
  if (d->k != b.dim(d->tb ? 1 : 0)) {
    return c.Error(absl::StrCat("inner dimensions differ: ", a.ToString(), " x ", b.ToString()));
  }
  return absl::OkStatus();
}

// Sizes around `axis`: outer (before), inner (after).
inline void AxisSplit(const TensorShape& s, int axis, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; ++i) *outer *= s.dim(i);
  for (int i = axis + 1; i < s.rank(); ++i) *inner *= s.dim(i);
}

inline int NormAxis(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }

struct ConvGeometry {
  int64_t n, h, w, c, k, f, s, oh, ow, pad_top, pad_left;
  int64_t rows() const { return n * oh * ow; }
  int64_t patch() const { return k * k * c; }
};

// From the input shape, the window size k, the output channels f and the
// node's stride and padding attrs.
inline absl::Status Geometry(const KernelContext& ctx, const TensorShape& x, int64_t k, int64_t f,
                             ConvGeometry* g) {
  if (x.rank() != 4) return ctx.Error(absl::StrCat("input must be NHWC, got ", x.ToString()));
  g->n = x.dim(0);
  g->h = x.dim(1);
  g->w = x.dim(2);
  g->c = x.dim(3);
  g->k = k;
  g->f = f;
  g->s = GetAttrI(*ctx.node, "stride", 1);
  bool same = GetAttrS(*ctx.node, "padding", "VALID") == "SAME";
  g->oh = same ? (g->h + g->s - 1) / g->s : (g->h - k + g->s) / g->s;
  g->ow = same ? (g->w + g->s - 1) / g->s : (g->w - k + g->s) / g->s;
  if (g->oh <= 0 || g->ow <= 0) return ctx.Error(absl::StrCat("window ", k, " does not fit ", x.ToString()));
  g->pad_top = same ? std::max<int64_t>(0, (g->oh - 1) * g->s + k - g->h) / 2 : 0;
  g->pad_left = same ? std::max<int64_t>(0, (g->ow - 1) * g->s + k - g->w) / 2 : 0;
  return absl::OkStatus();
}

// Transpose by the node's perm: y's axis i is x's axis perm[i]. dims are
// y's, strides[i] the step in x along y's axis i. in_order: the permutation
// only moves axes of size 1, so y has x's bytes (a reshape).
struct TransposePlan {
  std::vector<int64_t> dims, strides;
  bool in_order = true;
};
inline absl::Status PlanTranspose(const KernelContext& c, const TensorShape& x, TransposePlan* p) {
  const std::vector<int64_t> perm = GetAttrInts(*c.node, "perm");
  const int rank = x.rank();
  if (rank == 0 || static_cast<int>(perm.size()) != rank) return c.Error("perm does not match the input's rank");
  std::vector<int64_t> in_strides(rank);
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    in_strides[i] = stride;
    stride *= x.dim(i);
  }
  p->dims.assign(rank, 0);
  p->strides.assign(rank, 0);
  std::vector<bool> seen(rank, false);
  int64_t last_moved = -1;
  for (int i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) return c.Error("perm is not a permutation");
    seen[perm[i]] = true;
    p->dims[i] = x.dim(perm[i]);
    p->strides[i] = in_strides[perm[i]];
    if (p->dims[i] > 1) {
      if (perm[i] < last_moved) p->in_order = false;
      last_moved = perm[i];
    }
  }
  return absl::OkStatus();
}

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_KERNELS_KERNEL_SHAPES_H_
