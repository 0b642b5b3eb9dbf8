// Run-time shape logic shared by the CPU and GPU kernels, so both devices
// accept the same inputs and lay out results alike: matrix-product sizes,
// concat axes, and the window geometry of Conv2D and the pools (NHWC; see
// common/graph/window.h for the attrs).
#ifndef PSRT_COMMON_COMPUTE_KERNELS_KERNEL_SHAPES_H_
#define PSRT_COMMON_COMPUTE_KERNELS_KERNEL_SHAPES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"
#include "common/graph/window.h"
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
  int64_t n, h, w, c, f, oh, ow;
  int64_t kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right, group;
  bool count_include_pad;  // AvgPool
  int64_t rows() const { return n * oh * ow; }
  // One im2col row: for each group, the kh x kw window of its c / group
  // channels ([group, kh, kw, c / group]; with one group, TF's layout).
  int64_t patch() const { return kh * kw * c; }
  int64_t group_channels() const { return c / group; }
  int64_t group_patch() const { return kh * kw * (c / group); }
};

// From the input shape, the kernel size kh x kw (0: a pool's ksize attrs),
// the output channels f and the node's window attrs (common/graph/window.h).
inline absl::Status Geometry(const KernelContext& ctx, const TensorShape& x, int64_t kh, int64_t kw, int64_t f,
                             ConvGeometry* g) {
  if (x.rank() != 4) return ctx.Error(absl::StrCat("input must be NHWC, got ", x.ToString()));
  Window2D win;
  if (absl::Status s = ReadWindow(*ctx.node, kh, kw, &win); !s.ok()) return ctx.Error(s.message());
  g->n = x.dim(0);
  g->h = x.dim(1);
  g->w = x.dim(2);
  g->c = x.dim(3);
  g->f = f;
  WindowOut(&win, g->h, g->w, &g->oh, &g->ow);
  if (g->oh <= 0 || g->ow <= 0) {
    return ctx.Error(absl::StrCat("window ", win.kh, "x", win.kw, " does not fit ", x.ToString()));
  }
  if (g->c % win.group != 0 || f % win.group != 0) {
    return ctx.Error(absl::StrCat("group ", win.group, " does not divide the channels ", g->c, " and ", f));
  }
  g->kh = win.kh;
  g->kw = win.kw;
  g->sh = win.sh;
  g->sw = win.sw;
  g->dh = win.dh;
  g->dw = win.dw;
  g->pad_top = win.pad_top;
  g->pad_left = win.pad_left;
  g->pad_bottom = win.pad_bottom;
  g->pad_right = win.pad_right;
  g->group = win.group;
  g->count_include_pad = GetAttrB(*ctx.node, "count_include_pad");
  return absl::OkStatus();
}

// The kernel of a (x, kernel, ...) convolution: [kh, kw, c / group, f].
inline absl::Status ConvGeometryOf(const KernelContext& ctx, const TensorShape& x, const TensorShape& k,
                                   ConvGeometry* g) {
  if (k.rank() != 4 || x.rank() != 4) {
    return ctx.Error(absl::StrCat("kernel ", k.ToString(), " or input ", x.ToString(), " is not 4-D"));
  }
  if (absl::Status s = Geometry(ctx, x, k.dim(0), k.dim(1), k.dim(3), g); !s.ok()) return s;
  if (k.dim(2) * g->group != g->c) {
    return ctx.Error(absl::StrCat("kernel ", k.ToString(), " does not fit input ", x.ToString(), " in ", g->group,
                                  " groups"));
  }
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
