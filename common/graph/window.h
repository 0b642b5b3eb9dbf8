// The window of a Conv2D, MaxPool or AvgPool node (NHWC): kernel size,
// strides, dilations, padding and groups, read from the node's attrs. One
// reading serves the shape functions and the CPU and GPU kernels, so all
// three agree on every output size and pad.
//
// Attrs (all optional but the kernel size, which pools carry and
// convolutions take from their kernel's shape):
//   stride: int              equal strides (the layer list's form)
//   strides: [sh, sw]        overrides stride
//   dilations: [dh, dw]      1 = dense (convolutions only)
//   padding: SAME | VALID | EXPLICIT
//   pads: [top, left, bottom, right]   with EXPLICIT
//   group: int               convolutions: input and output channels split
//                            into `group` independent halves, thirds...
//                            (group == channels: depthwise)
//   ksize: int / ksizes: [kh, kw]      pools
//   count_include_pad: bool  AvgPool: padding counts in the divisor
#ifndef PSRT_COMMON_GRAPH_WINDOW_H_
#define PSRT_COMMON_GRAPH_WINDOW_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"

namespace psrt {

struct Window2D {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t group = 1;
  std::string padding = "VALID";

  // The kernel's extent on the input once dilated.
  int64_t extent_h() const { return dh * (kh - 1) + 1; }
  int64_t extent_w() const { return dw * (kw - 1) + 1; }
};

// Reads the attrs for a kh x kw kernel (kh, kw <= 0: the pool's ksize(s)
// attrs). Errors are INVALID_ARGUMENT naming nothing: callers add the node.
inline absl::Status ReadWindow(const NodeDef& n, int64_t kh, int64_t kw, Window2D* w) {
  if (kh <= 0 || kw <= 0) {
    std::vector<int64_t> ks = GetAttrInts(n, "ksizes");
    if (ks.empty()) {
      kh = kw = GetAttrI(n, "ksize", 2);
    } else if (ks.size() == 2) {
      kh = ks[0];
      kw = ks[1];
    } else {
      return absl::InvalidArgumentError("ksizes must have 2 values");
    }
  }
  w->kh = kh;
  w->kw = kw;
  w->sh = w->sw = GetAttrI(n, "stride", 1);
  std::vector<int64_t> s = GetAttrInts(n, "strides");
  if (!s.empty()) {
    if (s.size() != 2) return absl::InvalidArgumentError("strides must have 2 values");
    w->sh = s[0];
    w->sw = s[1];
  }
  std::vector<int64_t> d = GetAttrInts(n, "dilations");
  if (!d.empty()) {
    if (d.size() != 2) return absl::InvalidArgumentError("dilations must have 2 values");
    w->dh = d[0];
    w->dw = d[1];
  }
  w->group = GetAttrI(n, "group", 1);
  w->padding = GetAttrS(n, "padding", "VALID");
  // Bounds keep every product below int64 range for any sane input.
  constexpr int64_t kMax = int64_t{1} << 20;
  for (int64_t v : {w->kh, w->kw, w->sh, w->sw, w->dh, w->dw, w->group}) {
    if (v < 1 || v > kMax) return absl::InvalidArgumentError(absl::StrCat("window size, stride, dilation or group ", v, " is out of range"));
  }
  if (w->padding == "EXPLICIT") {
    std::vector<int64_t> p = GetAttrInts(n, "pads");
    if (p.size() != 4) return absl::InvalidArgumentError("pads must have 4 values [top, left, bottom, right]");
    for (int64_t v : p) {
      if (v < 0 || v > kMax) return absl::InvalidArgumentError(absl::StrCat("pad ", v, " is out of range"));
    }
    w->pad_top = p[0];
    w->pad_left = p[1];
    w->pad_bottom = p[2];
    w->pad_right = p[3];
  } else if (w->padding != "SAME" && w->padding != "VALID") {
    return absl::InvalidArgumentError("padding must be SAME, VALID or EXPLICIT");
  }
  return absl::OkStatus();
}

// Output size along one dim of `in` (-1: unknown) with kernel extent `ext`
// and stride `s`; SAME sets the pads (before, after) as TensorFlow places
// them (the odd one after). Returns <= 0 where the window does not fit.
inline int64_t WindowOutDim(int64_t in, int64_t ext, int64_t s, const std::string& padding, int64_t* before,
                            int64_t* after) {
  if (in < 0) return -1;
  if (padding == "SAME") {
    const int64_t out = (in + s - 1) / s, total = std::max<int64_t>(0, (out - 1) * s + ext - in);
    *before = total / 2;
    *after = total - total / 2;
    return out;
  }
  if (padding == "VALID") *before = *after = 0;
  const int64_t span = in + *before + *after - ext;
  return span < 0 ? 0 : span / s + 1;
}

// Output height and width for input h x w (-1 unknown); fills SAME's pads.
inline void WindowOut(Window2D* w, int64_t h, int64_t wd, int64_t* oh, int64_t* ow) {
  *oh = WindowOutDim(h, w->extent_h(), w->sh, w->padding, &w->pad_top, &w->pad_bottom);
  *ow = WindowOutDim(wd, w->extent_w(), w->sw, w->padding, &w->pad_left, &w->pad_right);
}

}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_WINDOW_H_
