// CPU kernels: convolution (im2col + matrix product; grouped convolutions
// one product per group, depthwise ones direct), max and average pooling, batch normalisation, embeddings,
// losses and metrics.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"
#include "common/compute/kernels/kernel.h"
#include "common/compute/kernels/kernel_shapes.h"

namespace psrt {
namespace {

// The im2col matrix [n*oh*ow, patch]: one row per output position, laid
// out [group, kh, kw, c / group]. With one group and no dilation along w,
// a kernel row (fixed kh) is one contiguous run of the NHWC input, so it is
// a single copy; padding is zeros.
Tensor Im2Col(const KernelContext& ctx, const ConvGeometry& g, const Tensor& x) {
  Tensor col(DT_FLOAT, TensorShape({g.rows(), g.patch()}));
  float* out = col.data<float>();
  const float* in = x.data<float>();
  const int64_t cg = g.group_channels();
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index r = begin; r < end; ++r) {
      const int64_t n = r / (g.oh * g.ow), rem = r % (g.oh * g.ow), oh = rem / g.ow, ow = rem % g.ow;
      const int64_t iw0 = ow * g.sw - g.pad_left;
      float* dst = out + r * g.patch();
      if (g.group == 1 && g.dw == 1) {
        const int64_t run = g.kw * g.c;
        const int64_t lo = std::max<int64_t>(0, -iw0), hi = std::min<int64_t>(g.kw, g.w - iw0);
        for (int64_t kh = 0; kh < g.kh; ++kh, dst += run) {
          const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
          if (ih < 0 || ih >= g.h || hi <= lo) {
            std::fill(dst, dst + run, 0.0f);
            continue;
          }
          std::fill(dst, dst + lo * g.c, 0.0f);
          std::memcpy(dst + lo * g.c, in + ((n * g.h + ih) * g.w + iw0 + lo) * g.c, (hi - lo) * g.c * sizeof(float));
          std::fill(dst + hi * g.c, dst + run, 0.0f);
        }
        continue;
      }
      for (int64_t grp = 0; grp < g.group; ++grp) {
        for (int64_t kh = 0; kh < g.kh; ++kh) {
          const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
          for (int64_t kw = 0; kw < g.kw; ++kw, dst += cg) {
            const int64_t iw = iw0 + kw * g.dw;
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) {
              std::fill(dst, dst + cg, 0.0f);
            } else {
              std::memcpy(dst, in + ((n * g.h + ih) * g.w + iw) * g.c + grp * cg, cg * sizeof(float));
            }
          }
        }
      }
    }
  };
  ctx.device->parallelFor(g.rows(), Eigen::TensorOpCost(g.patch() * 4, g.patch() * 4, g.patch()), work);
  return col;
}

using Dims = Eigen::array<Eigen::IndexPair<int>, 1>;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// A row-major block of `rows` x `cols` at `data` whose rows are `ld` apart:
// one group's columns of a wider matrix.
Strided Block(float* data, int64_t rows, int64_t cols, int64_t ld) {
  return Strided(data, rows, cols, Eigen::OuterStride<>(ld));
}

// Runs f(group) for every group, in parallel (each group's products are
// independent blocks of the same matrices).
template <typename F>
void ForEachGroup(const KernelContext& c, const ConvGeometry& g, F f) {
  const double flops = static_cast<double>(g.rows()) * g.group_patch() * (g.f / g.group) * 2;
  c.device->parallelFor(g.group, Eigen::TensorOpCost(0, 0, flops), [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index grp = begin; grp < end; ++grp) f(grp);
  });
}

// Depthwise convolution (one input channel per group, m = f / c filters
// each) computed directly: an im2col row would hold kh*kw values per
// channel for a product of depth 1, nine times the input's bytes for a
// 3x3 kernel. Output channel o reads input channel o / m; the kernel is
// [kh, kw, 1, f].
bool Depthwise(const ConvGeometry& g) { return g.group > 1 && g.group == g.c; }

// Calls f(kh, kw, input offset) for each window cell of output row r that
// lies on the image.
template <typename F>
inline void ForWindow(const ConvGeometry& g, int64_t r, F f) {
  const int64_t n = r / (g.oh * g.ow), rem = r % (g.oh * g.ow), oh = rem / g.ow, ow = rem % g.ow;
  for (int64_t kh = 0; kh < g.kh; ++kh) {
    const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t kw = 0; kw < g.kw; ++kw) {
      const int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
      if (iw < 0 || iw >= g.w) continue;
      f(kh, kw, ((n * g.h + ih) * g.w + iw) * g.c);
    }
  }
}

void DepthwiseForward(const KernelContext& c, const ConvGeometry& g, const float* x, const float* k, float* y) {
  const int64_t m = g.f / g.c;
  c.device->parallelFor(g.rows(), Eigen::TensorOpCost(g.kh * g.kw * g.c * 4, g.f * 4, g.kh * g.kw * g.f * 2),
                        [&](Eigen::Index begin, Eigen::Index end) {
                          for (Eigen::Index r = begin; r < end; ++r) {
                            float* out = y + r * g.f;
                            std::fill(out, out + g.f, 0.0f);
                            ForWindow(g, r, [&](int64_t kh, int64_t kw, int64_t at) {
                              const float* in = x + at;
                              const float* kr = k + (kh * g.kw + kw) * g.f;
                              if (m == 1) {
                                for (int64_t o = 0; o < g.f; ++o) out[o] += in[o] * kr[o];
                              } else {
                                for (int64_t o = 0; o < g.f; ++o) out[o] += in[o / m] * kr[o];
                              }
                            });
                          }
                        });
}

// dx: each image's outputs add into its own rows of dx (one image a task).
void DepthwiseInputGrad(const KernelContext& c, const ConvGeometry& g, const float* dy, const float* k, float* dx) {
  const int64_t m = g.f / g.c;
  c.device->parallelFor(g.n, Eigen::TensorOpCost(0, 0, g.oh * g.ow * g.kh * g.kw * g.f * 2),
                        [&](Eigen::Index begin, Eigen::Index end) {
                          for (Eigen::Index n = begin; n < end; ++n) {
                            for (int64_t r = n * g.oh * g.ow; r < (n + 1) * g.oh * g.ow; ++r) {
                              const float* gr = dy + r * g.f;
                              ForWindow(g, r, [&](int64_t kh, int64_t kw, int64_t at) {
                                float* out = dx + at;
                                const float* kr = k + (kh * g.kw + kw) * g.f;
                                if (m == 1) {
                                  for (int64_t o = 0; o < g.f; ++o) out[o] += gr[o] * kr[o];
                                } else {
                                  for (int64_t o = 0; o < g.f; ++o) out[o / m] += gr[o] * kr[o];
                                }
                              });
                            }
                          }
                        });
}

// dk: blocks of output rows sum into their own copy of dk, added up after
// (the threads would otherwise all write the same few kernel values).
void DepthwiseFilterGrad(const KernelContext& c, const ConvGeometry& g, const float* x, const float* dy, float* dk) {
  const int64_t m = g.f / g.c, size = g.kh * g.kw * g.f;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(g.rows(), 4 * c.device->numThreads()));
  std::vector<float> partial(blocks * size, 0.0f);
  c.device->parallelFor(blocks, Eigen::TensorOpCost(0, 0, g.rows() / blocks * g.kh * g.kw * g.f * 2),
                        [&](Eigen::Index begin, Eigen::Index end) {
                          for (Eigen::Index b = begin; b < end; ++b) {
                            float* acc = partial.data() + b * size;
                            const int64_t lo = g.rows() * b / blocks, hi = g.rows() * (b + 1) / blocks;
                            for (int64_t r = lo; r < hi; ++r) {
                              const float* gr = dy + r * g.f;
                              ForWindow(g, r, [&](int64_t kh, int64_t kw, int64_t at) {
                                const float* in = x + at;
                                float* kr = acc + (kh * g.kw + kw) * g.f;
                                if (m == 1) {
                                  for (int64_t o = 0; o < g.f; ++o) kr[o] += gr[o] * in[o];
                                } else {
                                  for (int64_t o = 0; o < g.f; ++o) kr[o] += gr[o] * in[o / m];
                                }
                              });
                            }
                          }
                        });
  std::fill(dk, dk + size, 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < size; ++i) dk[i] += partial[b * size + i];
  }
}

absl::Status Conv2D(KernelContext& c) {
  Tensor& x = c.inputs[0];
  Tensor& k = c.inputs[1];
  ConvGeometry g;
  if (auto s = ConvGeometryOf(c, x.shape(), k.shape(), &g); !s.ok()) return s;
  Tensor y(DT_FLOAT, TensorShape({g.n, g.oh, g.ow, g.f}));
  if (Depthwise(g)) {
    DepthwiseForward(c, g, x.data<float>(), k.data<float>(), y.data<float>());
    c.outputs = {y};
    return absl::OkStatus();
  }
  Tensor col = Im2Col(c, g, x);
  if (g.group == 1) {
    AsMatrix(y, g.rows(), g.f).device(*c.device) =
        AsMatrix(col, g.rows(), g.patch()).contract(AsMatrix(k, g.patch(), g.f), Dims{Eigen::IndexPair<int>(1, 0)});
  } else {
    const int64_t p = g.group_patch(), fg = g.f / g.group;
    ForEachGroup(c, g, [&](int64_t grp) {
      Block(y.data<float>() + grp * fg, g.rows(), fg, g.f).noalias() =
          Block(col.data<float>() + grp * p, g.rows(), p, g.patch()) * Block(k.data<float>() + grp * fg, p, fg, g.f);
    });
  }
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status Conv2DBackpropFilter(KernelContext& c) {
  Tensor& x = c.inputs[0];
  Tensor& k = c.inputs[1];
  Tensor& dy = c.inputs[2];
  ConvGeometry g;
  if (auto s = ConvGeometryOf(c, x.shape(), k.shape(), &g); !s.ok()) return s;
  if (dy.NumElements() != g.rows() * g.f) return c.Error("dy does not match the convolution");
  Tensor dk(DT_FLOAT, k.shape());
  if (Depthwise(g)) {
    DepthwiseFilterGrad(c, g, x.data<float>(), dy.data<float>(), dk.data<float>());
    c.outputs = {dk};
    return absl::OkStatus();
  }
  Tensor col = Im2Col(c, g, x);
  if (g.group == 1) {
    AsMatrix(dk, g.patch(), g.f).device(*c.device) =
        AsMatrix(col, g.rows(), g.patch()).contract(AsMatrix(dy, g.rows(), g.f), Dims{Eigen::IndexPair<int>(0, 0)});
  } else {
    const int64_t p = g.group_patch(), fg = g.f / g.group;
    ForEachGroup(c, g, [&](int64_t grp) {
      Block(dk.data<float>() + grp * fg, p, fg, g.f).noalias() =
          Block(col.data<float>() + grp * p, g.rows(), p, g.patch()).transpose() *
          Block(dy.data<float>() + grp * fg, g.rows(), fg, g.f);
    });
  }
  c.outputs = {dk};
  return absl::OkStatus();
}

absl::Status Conv2DBackpropInput(KernelContext& c) {
  Tensor& x = c.inputs[0];
  Tensor& k = c.inputs[1];
  Tensor& dy = c.inputs[2];
  ConvGeometry g;
  if (auto s = ConvGeometryOf(c, x.shape(), k.shape(), &g); !s.ok()) return s;
  if (dy.NumElements() != g.rows() * g.f) return c.Error("dy does not match the convolution");
  if (Depthwise(g)) {
    Tensor dx = Tensor::Zeros(DT_FLOAT, x.shape());
    DepthwiseInputGrad(c, g, dy.data<float>(), k.data<float>(), dx.data<float>());
    c.outputs = {dx};
    return absl::OkStatus();
  }
  Tensor dcol(DT_FLOAT, TensorShape({g.rows(), g.patch()}));
  if (g.group == 1) {
    AsMatrix(dcol, g.rows(), g.patch()).device(*c.device) =
        AsMatrix(dy, g.rows(), g.f).contract(AsMatrix(k, g.patch(), g.f), Dims{Eigen::IndexPair<int>(1, 1)});
  } else {
    const int64_t p = g.group_patch(), fg = g.f / g.group;
    ForEachGroup(c, g, [&](int64_t grp) {
      Block(dcol.data<float>() + grp * p, g.rows(), p, g.patch()).noalias() =
          Block(dy.data<float>() + grp * fg, g.rows(), fg, g.f) *
          Block(k.data<float>() + grp * fg, p, fg, g.f).transpose();
    });
  }
  Tensor dx = Tensor::Zeros(DT_FLOAT, x.shape());
  // col2im: overlapping windows add up, so scatter one image per task.
  float* out = dx.data<float>();
  const float* in = dcol.data<float>();
  const int64_t cg = g.group_channels();
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index n = begin; n < end; ++n) {
      for (int64_t r = n * g.oh * g.ow; r < (n + 1) * g.oh * g.ow; ++r) {
        const int64_t rem = r % (g.oh * g.ow), oh = rem / g.ow, ow = rem % g.ow;
        const float* src = in + r * g.patch();
        for (int64_t grp = 0; grp < g.group; ++grp) {
          for (int64_t kh = 0; kh < g.kh; ++kh) {
            const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
            for (int64_t kw = 0; kw < g.kw; ++kw, src += cg) {
              const int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
              if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
              float* dst = out + ((n * g.h + ih) * g.w + iw) * g.c + grp * cg;
              for (int64_t ch = 0; ch < cg; ++ch) dst[ch] += src[ch];
            }
          }
        }
      }
    }
  };
  c.device->parallelFor(g.n, Eigen::TensorOpCost(0, 0, g.oh * g.ow * g.patch() * 2), work);
  c.outputs = {dx};
  return absl::OkStatus();
}

// For each pooled output, the input offset of its maximum.
absl::Status PoolArgmax(const KernelContext& c, const Tensor& x, ConvGeometry* g, std::vector<int64_t>* arg) {
  if (auto s = Geometry(c, x.shape(), 0, 0, x.shape().rank() == 4 ? x.shape().dim(3) : 0, g); !s.ok()) return s;
  arg->assign(g->rows() * g->c, -1);
  const float* in = x.data<float>();
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index r = begin; r < end; ++r) {
      int64_t n = r / (g->oh * g->ow), rem = r % (g->oh * g->ow), oh = rem / g->ow, ow = rem % g->ow;
      for (int64_t ch = 0; ch < g->c; ++ch) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t at = -1;
        for (int64_t kh = 0; kh < g->kh; ++kh) {
          int64_t ih = oh * g->sh - g->pad_top + kh * g->dh;
          if (ih < 0 || ih >= g->h) continue;
          for (int64_t kw = 0; kw < g->kw; ++kw) {
            int64_t iw = ow * g->sw - g->pad_left + kw * g->dw;
            if (iw < 0 || iw >= g->w) continue;
            int64_t o = ((n * g->h + ih) * g->w + iw) * g->c + ch;
            if (at < 0 || in[o] > best) {
              best = in[o];
              at = o;
            }
          }
        }
        (*arg)[r * g->c + ch] = at;
      }
    }
  };
  c.device->parallelFor(g->rows(), Eigen::TensorOpCost(0, 0, g->kh * g->kw * g->c * 2), work);
  return absl::OkStatus();
}

absl::Status MaxPool(KernelContext& c) {
  ConvGeometry g;
  std::vector<int64_t> arg;
  if (auto s = PoolArgmax(c, c.inputs[0], &g, &arg); !s.ok()) return s;
  Tensor y(DT_FLOAT, TensorShape({g.n, g.oh, g.ow, g.c}));
  for (size_t i = 0; i < arg.size(); ++i) y.data<float>()[i] = arg[i] < 0 ? 0.0f : c.inputs[0].data<float>()[arg[i]];
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status MaxPoolGrad(KernelContext& c) {
  ConvGeometry g;
  std::vector<int64_t> arg;
  if (auto s = PoolArgmax(c, c.inputs[0], &g, &arg); !s.ok()) return s;
  if (c.inputs[2].NumElements() != static_cast<int64_t>(arg.size())) return c.Error("dy does not match the pooled shape");
  Tensor dx = Tensor::Zeros(DT_FLOAT, c.inputs[0].shape());
  const float* dy = c.inputs[2].data<float>();
  for (size_t i = 0; i < arg.size(); ++i) {
    if (arg[i] >= 0) dx.data<float>()[arg[i]] += dy[i];
  }
  c.outputs = {dx};
  return absl::OkStatus();
}

// The rows [lo, hi) of the window of output row `o` (any axis) that lie on
// the image, and the divisor: the window's size within the padded image
// (count_include_pad, PyTorch's default) or its on-image cells only.
struct AvgSpan {
  int64_t lo, hi, count;
};
inline AvgSpan AvgAxis(int64_t o, int64_t s, int64_t pad_before, int64_t k, int64_t in, int64_t pad_after,
                       bool include_pad) {
  const int64_t start = o * s - pad_before;
  AvgSpan a{start, start + k, 0};
  const int64_t lo = std::max<int64_t>(a.lo, 0), hi = std::min<int64_t>(a.hi, in);
  const int64_t padded_hi = std::min<int64_t>(a.hi, in + pad_after);
  a.count = include_pad ? padded_hi - a.lo : hi - lo;
  a.lo = lo;
  a.hi = hi;
  return a;
}

// y[n, oh, ow, c] = mean of x over the window (NHWC, dense windows).
absl::Status AvgPool(KernelContext& c) {
  const Tensor& x = c.inputs[0];
  ConvGeometry g;
  if (auto s = Geometry(c, x.shape(), 0, 0, x.shape().rank() == 4 ? x.shape().dim(3) : 0, &g); !s.ok()) return s;
  if (g.dh != 1 || g.dw != 1) return c.Error("dilated average pooling is not supported");
  Tensor y = Tensor::Zeros(DT_FLOAT, TensorShape({g.n, g.oh, g.ow, g.c}));
  const float* in = x.data<float>();
  float* out = y.data<float>();
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index r = begin; r < end; ++r) {
      const int64_t n = r / (g.oh * g.ow), rem = r % (g.oh * g.ow), i = rem / g.ow, j = rem % g.ow;
      const AvgSpan a = AvgAxis(i, g.sh, g.pad_top, g.kh, g.h, g.pad_bottom, g.count_include_pad);
      const AvgSpan b = AvgAxis(j, g.sw, g.pad_left, g.kw, g.w, g.pad_right, g.count_include_pad);
      float* dst = out + r * g.c;
      for (int64_t ih = a.lo; ih < a.hi; ++ih) {
        for (int64_t iw = b.lo; iw < b.hi; ++iw) {
          const float* src = in + ((n * g.h + ih) * g.w + iw) * g.c;
          for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] += src[ch];
        }
      }
      const int64_t count = a.count * b.count;
      const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
      for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] *= scale;
    }
  };
  c.device->parallelFor(g.rows(), Eigen::TensorOpCost(0, 0, g.kh * g.kw * g.c), work);
  c.outputs = {y};
  return absl::OkStatus();
}

// (dy, x) -> dx: each output spreads dy / count over its window; one image
// per task, as overlapping windows add up.
absl::Status AvgPoolGrad(KernelContext& c) {
  const Tensor& dy = c.inputs[0];
  const Tensor& x = c.inputs[1];
  ConvGeometry g;
  if (auto s = Geometry(c, x.shape(), 0, 0, x.shape().rank() == 4 ? x.shape().dim(3) : 0, &g); !s.ok()) return s;
  if (g.dh != 1 || g.dw != 1) return c.Error("dilated average pooling is not supported");
  if (dy.NumElements() != g.rows() * g.c) return c.Error("dy does not match the pooled shape");
  Tensor dx = Tensor::Zeros(DT_FLOAT, x.shape());
  const float* in = dy.data<float>();
  float* out = dx.data<float>();
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index n = begin; n < end; ++n) {
      for (int64_t i = 0; i < g.oh; ++i) {
        const AvgSpan a = AvgAxis(i, g.sh, g.pad_top, g.kh, g.h, g.pad_bottom, g.count_include_pad);
        for (int64_t j = 0; j < g.ow; ++j) {
          const AvgSpan b = AvgAxis(j, g.sw, g.pad_left, g.kw, g.w, g.pad_right, g.count_include_pad);
          const int64_t count = a.count * b.count;
          if (count <= 0) continue;
          const float scale = 1.0f / static_cast<float>(count);
          const float* src = in + ((n * g.oh + i) * g.ow + j) * g.c;
          for (int64_t ih = a.lo; ih < a.hi; ++ih) {
            for (int64_t iw = b.lo; iw < b.hi; ++iw) {
              float* dst = out + ((n * g.h + ih) * g.w + iw) * g.c;
              for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] += src[ch] * scale;
            }
          }
        }
      }
    }
  };
  c.device->parallelFor(g.n, Eigen::TensorOpCost(0, 0, g.oh * g.ow * g.kh * g.kw * g.c), work);
  c.outputs = {dx};
  return absl::OkStatus();
}

// x seen as [rows, channels] (every axis but the last is a row).
absl::Status ChannelRows(const KernelContext& c, const Tensor& x, int64_t* rows, int64_t* channels) {
  if (x.shape().rank() < 2) return c.Error(absl::StrCat("input ", x.shape().ToString(), " has no channel axis"));
  *channels = x.shape().dim(x.shape().rank() - 1);
  *rows = *channels == 0 ? 0 : x.NumElements() / *channels;
  if (*rows == 0) return c.Error("batch normalisation of an empty batch");
  return absl::OkStatus();
}

// y = (x - mean) / sqrt(var + epsilon) * scale + offset, with the batch's
// per-channel mean and biased variance in a training step, and with the
// moving mean and variance (inputs 3 and 4, where given) in evaluation.
// Outputs the batch's mean, biased variance and unbiased variance either
// way (sums in double: a batch of images is tens of thousands of rows per
// channel). A single row has no unbiased variance: its biased one (0)
// stands in, so that evaluating one example does not divide by zero.
absl::Status BatchNorm(KernelContext& c) {
  const Tensor& x = c.inputs[0];
  int64_t rows, ch;
  if (auto s = ChannelRows(c, x, &rows, &ch); !s.ok()) return s;
  if (c.inputs.size() != 3 && c.inputs.size() != 5) return c.Error("takes 3 or 5 inputs");
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    if (c.inputs[i].NumElements() != ch) return c.Error("scale, offset or a moving statistic does not match the channels");
  }
  const float eps = GetAttrF(*c.node, "epsilon", 1e-5f);
  Tensor y(DT_FLOAT, x.shape()), mean(DT_FLOAT, TensorShape({ch})), var(DT_FLOAT, TensorShape({ch}));
  Tensor unbiased(DT_FLOAT, TensorShape({ch}));
  std::vector<double> sum(ch, 0.0), sq(ch, 0.0);
  const float* in = x.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * ch;
    for (int64_t j = 0; j < ch; ++j) sum[j] += row[j];
  }
  for (int64_t j = 0; j < ch; ++j) mean.data<float>()[j] = static_cast<float>(sum[j] / rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * ch;
    for (int64_t j = 0; j < ch; ++j) {
      const double d = row[j] - mean.data<float>()[j];
      sq[j] += d * d;
    }
  }
  const bool moving = !c.training && c.inputs.size() == 5;
  const float* use_mean = moving ? c.inputs[3].data<float>() : mean.data<float>();
  const float* use_var = moving ? c.inputs[4].data<float>() : var.data<float>();
  std::vector<float> a(ch), b(ch);  // y = x * a + b
  for (int64_t j = 0; j < ch; ++j) {
    var.data<float>()[j] = static_cast<float>(sq[j] / rows);
    unbiased.data<float>()[j] = static_cast<float>(rows > 1 ? sq[j] / (rows - 1) : sq[j] / rows);
    a[j] = c.inputs[1].data<float>()[j] / std::sqrt(use_var[j] + eps);
    b[j] = c.inputs[2].data<float>()[j] - use_mean[j] * a[j];
  }
  float* out = y.data<float>();
  c.device->parallelFor(rows, Eigen::TensorOpCost(ch * 4, ch * 4, ch * 2), [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index r = begin; r < end; ++r) {
      for (int64_t j = 0; j < ch; ++j) out[r * ch + j] = in[r * ch + j] * a[j] + b[j];
    }
  });
  c.outputs = {y, mean, var, unbiased};
  return absl::OkStatus();
}

// (dy, x, scale, mean, var) -> dx, dscale, doffset, with xhat the
// normalised x: doffset = sum(dy), dscale = sum(dy * xhat),
// dx = scale / sqrt(var + eps) * (dy - (doffset + xhat * dscale) / rows).
absl::Status BatchNormGrad(KernelContext& c) {
  const Tensor& dy = c.inputs[0];
  const Tensor& x = c.inputs[1];
  int64_t rows, ch;
  if (auto s = ChannelRows(c, x, &rows, &ch); !s.ok()) return s;
  if (dy.NumElements() != x.NumElements()) return c.Error("dy and x differ in size");
  for (int i = 2; i <= 4; ++i) {
    if (c.inputs[i].NumElements() != ch) return c.Error("scale, mean or var does not match the channels");
  }
  const float eps = GetAttrF(*c.node, "epsilon", 1e-5f);
  const float* g = dy.data<float>();
  const float* in = x.data<float>();
  const float* mean = c.inputs[3].data<float>();
  std::vector<float> rstd(ch);
  for (int64_t j = 0; j < ch; ++j) rstd[j] = 1.0f / std::sqrt(c.inputs[4].data<float>()[j] + eps);
  std::vector<double> sum(ch, 0.0), dot(ch, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < ch; ++j) {
      const int64_t i = r * ch + j;
      sum[j] += g[i];
      dot[j] += static_cast<double>(g[i]) * (in[i] - mean[j]) * rstd[j];
    }
  }
  Tensor dx(DT_FLOAT, x.shape()), dscale(DT_FLOAT, TensorShape({ch})), doffset(DT_FLOAT, TensorShape({ch}));
  std::vector<float> k(ch), mean_g(ch), mean_gx(ch);
  for (int64_t j = 0; j < ch; ++j) {
    doffset.data<float>()[j] = static_cast<float>(sum[j]);
    dscale.data<float>()[j] = static_cast<float>(dot[j]);
    k[j] = c.inputs[2].data<float>()[j] * rstd[j];
    mean_g[j] = static_cast<float>(sum[j] / rows);
    mean_gx[j] = static_cast<float>(dot[j] / rows);
  }
  float* out = dx.data<float>();
  c.device->parallelFor(rows, Eigen::TensorOpCost(ch * 8, ch * 4, ch * 6), [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index r = begin; r < end; ++r) {
      for (int64_t j = 0; j < ch; ++j) {
        const int64_t i = r * ch + j;
        const float xhat = (in[i] - mean[j]) * rstd[j];
        out[i] = k[j] * (g[i] - mean_g[j] - xhat * mean_gx[j]);
      }
    }
  });
  c.outputs = {dx, dscale, doffset};
  return absl::OkStatus();
}

absl::Status CheckIndex(const KernelContext& c, const Tensor& index, int64_t rows) {
  if (index.dtype() != DT_INT64) return c.Error("index must be int64");
  for (int64_t i : index.span<int64_t>()) {
    if (i < 0 || i >= rows) return c.Error(absl::StrCat("index ", i, " out of range [0, ", rows, ")"));
  }
  return absl::OkStatus();
}

absl::Status EmbeddingLookup(KernelContext& c) {
  Tensor& rows = c.inputs[0];
  Tensor& index = c.inputs[1];
  if (auto s = CheckIndex(c, index, rows.shape().dim(0)); !s.ok()) return s;
  int64_t d = rows.shape().dim(1), b = index.NumElements();
  std::vector<int64_t> dims = index.shape().dims();
  dims.push_back(d);
  Tensor y(DT_FLOAT, TensorShape(dims));
  for (int64_t i = 0; i < b; ++i) {
    std::memcpy(y.data<float>() + i * d, rows.data<float>() + index.data<int64_t>()[i] * d, d * sizeof(float));
  }
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status EmbeddingLookupGrad(KernelContext& c) {
  Tensor& dy = c.inputs[0];
  Tensor& index = c.inputs[1];
  Tensor& rows = c.inputs[2];
  if (auto s = CheckIndex(c, index, rows.shape().dim(0)); !s.ok()) return s;
  int64_t d = rows.shape().dim(1);
  if (dy.NumElements() != index.NumElements() * d) return c.Error("dy does not match the ids");
  Tensor dr = Tensor::Zeros(DT_FLOAT, rows.shape());
  for (int64_t i = 0; i < index.NumElements(); ++i) {
    float* dst = dr.data<float>() + index.data<int64_t>()[i] * d;
    for (int64_t k = 0; k < d; ++k) dst[k] += dy.data<float>()[i * d + k];
  }
  c.outputs = {dr};
  return absl::OkStatus();
}

absl::Status EmbeddingBag(KernelContext& c) {
  Tensor& rows = c.inputs[0];
  Tensor& index = c.inputs[1];
  Tensor& splits = c.inputs[2];
  if (auto s = CheckIndex(c, index, rows.shape().dim(0)); !s.ok()) return s;
  int64_t d = rows.shape().dim(1), b = splits.NumElements() - 1;
  bool mean = GetAttrS(*c.node, "combiner", "sum") == "mean";
  if (b < 0 || splits.data<int64_t>()[b] != index.NumElements()) return c.Error("row_splits do not cover the ids");
  Tensor y = Tensor::Zeros(DT_FLOAT, TensorShape({b, d}));
  for (int64_t e = 0; e < b; ++e) {
    int64_t lo = splits.data<int64_t>()[e], hi = splits.data<int64_t>()[e + 1];
    float* out = y.data<float>() + e * d;
    for (int64_t j = lo; j < hi; ++j) {
      const float* r = rows.data<float>() + index.data<int64_t>()[j] * d;
      for (int64_t k = 0; k < d; ++k) out[k] += r[k];
    }
    if (mean && hi > lo) {
      for (int64_t k = 0; k < d; ++k) out[k] /= static_cast<float>(hi - lo);
    }
  }
  c.outputs = {y};
  return absl::OkStatus();
}

absl::Status EmbeddingBagGrad(KernelContext& c) {
  Tensor& dy = c.inputs[0];
  Tensor& index = c.inputs[1];
  Tensor& splits = c.inputs[2];
  Tensor& rows = c.inputs[3];
  int64_t d = rows.shape().dim(1), b = splits.NumElements() - 1;
  bool mean = GetAttrS(*c.node, "combiner", "sum") == "mean";
  Tensor dr = Tensor::Zeros(DT_FLOAT, rows.shape());
  for (int64_t e = 0; e < b; ++e) {
    int64_t lo = splits.data<int64_t>()[e], hi = splits.data<int64_t>()[e + 1];
    float scale = mean && hi > lo ? 1.0f / static_cast<float>(hi - lo) : 1.0f;
    for (int64_t j = lo; j < hi; ++j) {
      float* dst = dr.data<float>() + index.data<int64_t>()[j] * d;
      for (int64_t k = 0; k < d; ++k) dst[k] += scale * dy.data<float>()[e * d + k];
    }
  }
  c.outputs = {dr};
  return absl::OkStatus();
}

double LabelAt(const Tensor& labels, int64_t i) {
  return labels.dtype() == DT_INT64 ? static_cast<double>(labels.data<int64_t>()[i]) : labels.data<float>()[i];
}

// Logits [B, C] and integer labels [B]: -log softmax(logits)[label], mean.
absl::Status SoftmaxXent(KernelContext& c, bool grad) {
  Tensor& dl = c.inputs[0];
  Tensor& logits = c.inputs[grad ? 1 : 0];
  Tensor& labels = c.inputs[grad ? 2 : 1];
  if (logits.shape().rank() != 2 || labels.NumElements() != logits.shape().dim(0)) {
    return c.Error(absl::StrCat("logits ", logits.shape().ToString(), " and labels ", labels.shape().ToString()));
  }
  int64_t b = logits.shape().dim(0), n = logits.shape().dim(1);
  Tensor out = grad ? Tensor(DT_FLOAT, logits.shape()) : Tensor::Scalar<float>(0);
  double total = 0;
  float upstream = grad ? dl.data<float>()[0] / static_cast<float>(b) : 0;
  // Label smoothing (Keras'): the target is (1 - s) at the label plus s / n
  // everywhere, so the loss is logsumexp - (1 - s) x_label - s mean(x).
  const float smoothing = GetAttrF(*c.node, "label_smoothing", 0.0f);
  const float off = smoothing / static_cast<float>(n), on = 1.0f - smoothing + off;
  for (int64_t i = 0; i < b; ++i) {
    double l = LabelAt(labels, i);
    if (l < 0 || l >= n || l != std::floor(l)) return c.Error(absl::StrCat("label ", l, " is not a class in [0, ", n, ")"));
    const float* x = logits.data<float>() + i * n;
    float m = *std::max_element(x, x + n);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
    if (grad) {
      for (int64_t j = 0; j < n; ++j) {
        float p = static_cast<float>(std::exp(x[j] - m) / s);
        out.data<float>()[i * n + j] = upstream * (p - (j == static_cast<int64_t>(l) ? on : off));
      }
    } else {
      total += std::log(s) + m - (1.0 - smoothing) * x[static_cast<int64_t>(l)];
      if (smoothing > 0) {
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += x[j];
        total -= smoothing * sum / static_cast<double>(n);
      }
    }
  }
  if (!grad) out.data<float>()[0] = static_cast<float>(total / b);
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status SigmoidXent(KernelContext& c, bool grad) {
  Tensor& logits = c.inputs[grad ? 1 : 0];
  Tensor& labels = c.inputs[grad ? 2 : 1];
  int64_t b = logits.NumElements();
  if (labels.NumElements() != b) return c.Error("logits and labels differ in size");
  Tensor out = grad ? Tensor(DT_FLOAT, logits.shape()) : Tensor::Scalar<float>(0);
  float upstream = grad ? c.inputs[0].data<float>()[0] / static_cast<float>(b) : 0;
  double total = 0;
  // Label smoothing (Keras'): the target z becomes z (1 - s) + s / 2.
  const double smoothing = GetAttrF(*c.node, "label_smoothing", 0.0f);
  for (int64_t i = 0; i < b; ++i) {
    double x = logits.data<float>()[i], z = LabelAt(labels, i) * (1.0 - smoothing) + 0.5 * smoothing;
    if (grad) {
      out.data<float>()[i] = upstream * static_cast<float>(1.0 / (1.0 + std::exp(-x)) - z);
    } else {
      total += std::max(x, 0.0) - x * z + std::log1p(std::exp(-std::fabs(x)));
    }
  }
  if (!grad) out.data<float>()[0] = static_cast<float>(total / b);
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status Mse(KernelContext& c, bool grad) {
  Tensor& pred = c.inputs[grad ? 1 : 0];
  Tensor& labels = c.inputs[grad ? 2 : 1];
  int64_t n = pred.NumElements();
  if (labels.NumElements() != n) return c.Error("predictions and labels differ in size");
  Tensor out = grad ? Tensor(DT_FLOAT, pred.shape()) : Tensor::Scalar<float>(0);
  float upstream = grad ? c.inputs[0].data<float>()[0] * 2.0f / static_cast<float>(n) : 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = pred.data<float>()[i] - LabelAt(labels, i);
    if (grad) {
      out.data<float>()[i] = upstream * static_cast<float>(d);
    } else {
      total += d * d;
    }
  }
  if (!grad) out.data<float>()[0] = static_cast<float>(total / n);
  c.outputs = {out};
  return absl::OkStatus();
}

// The metric ops output sufficient statistics, summed over batches by the
// evaluation (see common/compute/metric_stats.h): [numerator, denominator]
// for the ratios, per-threshold confusion counts for Auc.
Tensor Stats(std::initializer_list<double> v) {
  Tensor t(DT_FLOAT, TensorShape({static_cast<int64_t>(v.size())}));
  int64_t i = 0;
  for (double x : v) t.data<float>()[i++] = static_cast<float>(x);
  return t;
}

// The probability a sigmoid output gives, in float as Keras computes it.
float Probability(float logit) { return 1.0f / (1.0f + std::exp(-logit)); }

// [right, examples]: argmax == label, or logit > 0 == label > 0.5 for one output.
absl::Status Accuracy(KernelContext& c) {
  Tensor& logits = c.inputs[0];
  Tensor& labels = c.inputs[1];
  int64_t b = labels.NumElements();
  if (b == 0) return c.Error("empty batch");
  if (logits.NumElements() % b != 0) return c.Error("predictions and labels differ in batch size");
  int64_t n = logits.NumElements() / b;
  int64_t right = 0;
  for (int64_t i = 0; i < b; ++i) {
    const float* x = logits.data<float>() + i * n;
    double l = LabelAt(labels, i);
    if (n == 1) {
      right += (x[0] > 0) == (l > 0.5);
    } else {
      right += (std::max_element(x, x + n) - x) == static_cast<int64_t>(l);
    }
  }
  c.outputs = {Stats({static_cast<double>(right), static_cast<double>(b)})};
  return absl::OkStatus();
}

// [in_top_k, examples], as Keras' SparseTopKCategoricalAccuracy (tf's
// in_top_k): the label's logit has fewer than k logits above it (ties with
// the k-th count as in); a non-finite logit or a label out of range is out.
absl::Status TopKAccuracy(KernelContext& c) {
  Tensor& logits = c.inputs[0];
  Tensor& labels = c.inputs[1];
  const int64_t k = GetAttrI(*c.node, "k", 5);
  if (k < 1) return c.Error(absl::StrCat("k is ", k, ", not positive"));
  int64_t b = labels.NumElements();
  if (b == 0) return c.Error("empty batch");
  if (logits.shape().rank() != 2 || logits.shape().dim(0) != b) {
    return c.Error(absl::StrCat("needs logits [batch, classes] for ", b, " labels, got ", logits.shape().ToString()));
  }
  const int64_t n = logits.shape().dim(1);
  int64_t right = 0;
  for (int64_t i = 0; i < b; ++i) {
    const float* x = logits.data<float>() + i * n;
    const double l = LabelAt(labels, i);
    if (!(l >= 0 && l < n)) continue;
    const float target = x[static_cast<int64_t>(l)];
    if (!std::isfinite(target)) continue;
    int64_t above = 0;
    for (int64_t j = 0; j < n; ++j) above += x[j] > target;
    right += above < k;
  }
  c.outputs = {Stats({static_cast<double>(right), static_cast<double>(b)})};
  return absl::OkStatus();
}

// [sum |prediction - label|, predictions].
absl::Status MeanAbsoluteError(KernelContext& c) {
  Tensor& pred = c.inputs[0];
  Tensor& labels = c.inputs[1];
  int64_t n = pred.NumElements();
  if (n == 0) return c.Error("empty batch");
  if (labels.NumElements() != n) return c.Error("predictions and labels differ in size");
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += std::fabs(static_cast<double>(pred.data<float>()[i]) - LabelAt(labels, i));
  c.outputs = {Stats({total, static_cast<double>(n)})};
  return absl::OkStatus();
}

// One sigmoid output per label (logits [batch] or [batch, 1]).
absl::Status BinaryInputs(KernelContext& c) {
  if (c.inputs[1].NumElements() == 0) return c.Error("empty batch");
  if (c.inputs[0].NumElements() != c.inputs[1].NumElements()) {
    return c.Error(absl::StrCat("needs one sigmoid output per label, got ", c.inputs[0].shape().ToString(), " for ",
                                c.inputs[1].NumElements(), " labels"));
  }
  return absl::OkStatus();
}

// Precision: [true positives, predicted positives]; Recall: [true
// positives, positives]. Predicted positive: probability > 0.5 (Keras'
// default threshold); positive: label > 0.5.
absl::Status PrecisionOrRecall(KernelContext& c, bool recall) {
  RETURN_IF_ERROR(BinaryInputs(c));
  const Tensor& logits = c.inputs[0];
  double tp = 0, den = 0;
  for (int64_t i = 0; i < logits.NumElements(); ++i) {
    const bool predicted = Probability(logits.data<float>()[i]) > 0.5f;
    const bool positive = LabelAt(c.inputs[1], i) > 0.5;
    tp += predicted && positive;
    den += recall ? positive : predicted;
  }
  c.outputs = {Stats({tp, den})};
  return absl::OkStatus();
}

// [tp[T], fp[T], tn[T], fn[T]] at Keras' AUC thresholds: -1e-7, i/(T-1)
// for i in 1..T-2, 1 + 1e-7; predicted positive: probability > threshold.
absl::Status Auc(KernelContext& c) {
  RETURN_IF_ERROR(BinaryInputs(c));
  const int64_t t = GetAttrI(*c.node, "num_thresholds", 200);
  if (t < 2) return c.Error(absl::StrCat("num_thresholds is ", t, ", needs at least 2"));
  std::vector<float> thresholds(t);
  for (int64_t i = 1; i + 1 < t; ++i) thresholds[i] = static_cast<float>(static_cast<double>(i) / (t - 1));
  thresholds[0] = 0.0f - 1e-7f;
  thresholds[t - 1] = 1.0f + 1e-7f;
  Tensor out(DT_FLOAT, TensorShape({4 * t}));
  std::vector<double> counts(4 * t, 0.0);
  const Tensor& logits = c.inputs[0];
  for (int64_t i = 0; i < logits.NumElements(); ++i) {
    const float p = Probability(logits.data<float>()[i]);
    const bool positive = LabelAt(c.inputs[1], i) > 0.5;
    for (int64_t j = 0; j < t; ++j) {
      const bool predicted = p > thresholds[j];
      counts[(positive ? (predicted ? 0 : 3) : (predicted ? 1 : 2)) * t + j] += 1;
    }
  }
  for (int64_t j = 0; j < 4 * t; ++j) out.data<float>()[j] = static_cast<float>(counts[j]);
  c.outputs = {out};
  return absl::OkStatus();
}

}  // namespace

void RegisterCpuNnKernels(KernelRegistry* r) {
  r->Register("Conv2D", Conv2D);
  r->Register("Conv2DBackpropFilter", Conv2DBackpropFilter);
  r->Register("Conv2DBackpropInput", Conv2DBackpropInput);
  r->Register("MaxPool", MaxPool);
  r->Register("MaxPoolGrad", MaxPoolGrad);
  r->Register("AvgPool", AvgPool);
  r->Register("AvgPoolGrad", AvgPoolGrad);
  r->Register("BatchNorm", BatchNorm);
  r->Register("BatchNormGrad", BatchNormGrad);
  r->Register("EmbeddingLookup", EmbeddingLookup);
  r->Register("EmbeddingLookupGrad", EmbeddingLookupGrad);
  r->Register("EmbeddingBag", EmbeddingBag);
  r->Register("EmbeddingBagGrad", EmbeddingBagGrad);
  r->Register("SoftmaxCrossEntropy", [](KernelContext& c) { return SoftmaxXent(c, false); });
  r->Register("SoftmaxCrossEntropyGrad", [](KernelContext& c) { return SoftmaxXent(c, true); });
  r->Register("SigmoidCrossEntropy", [](KernelContext& c) { return SigmoidXent(c, false); });
  r->Register("SigmoidCrossEntropyGrad", [](KernelContext& c) { return SigmoidXent(c, true); });
  r->Register("MeanSquaredError", [](KernelContext& c) { return Mse(c, false); });
  r->Register("MeanSquaredErrorGrad", [](KernelContext& c) { return Mse(c, true); });
  r->Register("Accuracy", Accuracy);
  r->Register("TopKAccuracy", TopKAccuracy);
  r->Register("MeanAbsoluteError", MeanAbsoluteError);
  r->Register("Precision", [](KernelContext& c) { return PrecisionOrRecall(c, false); });
  r->Register("Recall", [](KernelContext& c) { return PrecisionOrRecall(c, true); });
  r->Register("Auc", Auc);
}

}  // namespace psrt
