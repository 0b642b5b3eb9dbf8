// CPU kernels of the sequence-model ops (common/graph/ops_sequence.cc):
// batched matrix products, layer normalisation, slices, BroadcastTo, and
// Erf / Sqrt / Pow with their gradients.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "Eigen/Core"
#include "unsupported/Eigen/SpecialFunctions"
#include "absl/strings/str_cat.h"
#include "common/compute/kernels/broadcast.h"
#include "common/compute/kernels/kernel.h"
#include "common/graph/graph_builder.h"

namespace psrt {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrix = Eigen::Map<const RowMatrix>;
using MutMatrix = Eigen::Map<RowMatrix>;

// Each batch entry's product on one thread: attention's matrices are small
// ([T, d] x [d, T]) and many, so the batch is the parallelism.
absl::Status BatchMatMul(KernelContext& c) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const int r = a.shape().rank();
  if (r < 3 || b.shape().rank() != r) {
    return c.Error(absl::StrCat("needs two inputs of the same rank >= 3, got ", a.shape().ToString(), " and ",
                                b.shape().ToString()));
  }
  int64_t batch = 1;
  std::vector<int64_t> dims;
  for (int i = 0; i + 2 < r; ++i) {
    if (a.shape().dim(i) != b.shape().dim(i)) {
      return c.Error(absl::StrCat("batch dims differ: ", a.shape().ToString(), " and ", b.shape().ToString()));
    }
    batch *= a.shape().dim(i);
    dims.push_back(a.shape().dim(i));
  }
  const bool ax = GetAttrB(*c.node, "adj_x"), ay = GetAttrB(*c.node, "adj_y");
  const int64_t ar = a.shape().dim(r - 2), ac = a.shape().dim(r - 1), br = b.shape().dim(r - 2), bc = b.shape().dim(r - 1);
  const int64_t m = ax ? ac : ar, k = ax ? ar : ac, k2 = ay ? bc : br, n = ay ? br : bc;
  if (k != k2) return c.Error(absl::StrCat("inner dimensions differ: ", a.shape().ToString(), " x ", b.shape().ToString()));
  dims.push_back(m);
  dims.push_back(n);
  Tensor out(DT_FLOAT, TensorShape(dims));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index i = begin; i < end; ++i) {
      ConstMatrix A(pa + i * ar * ac, ar, ac), B(pb + i * br * bc, br, bc);
      MutMatrix C(po + i * m * n, m, n);
      if (!ax && !ay) {
        C.noalias() = A * B;
      } else if (!ax) {
        C.noalias() = A * B.transpose();
      } else if (!ay) {
        C.noalias() = A.transpose() * B;
      } else {
        C.noalias() = A.transpose() * B.transpose();
      }
    }
  };
  c.device->parallelFor(batch, Eigen::TensorOpCost(4 * m * k, 4 * m * n, 2 * m * n * k), work);
  c.outputs = {out};
  return absl::OkStatus();
}

// Rows of the last axis: [rows, dim].
absl::Status LastAxis(const KernelContext& c, const Tensor& x, const Tensor& gamma, int64_t* rows, int64_t* dim) {
  if (x.shape().rank() == 0) return c.Error("input has no axis to normalise");
  *dim = x.shape().dim(x.shape().rank() - 1);
  if (gamma.shape().rank() != 1 || gamma.shape().dim(0) != *dim) {
    return c.Error(absl::StrCat("gamma ", gamma.shape().ToString(), " does not match ", x.shape().ToString()));
  }
  *rows = *dim == 0 ? 0 : x.NumElements() / *dim;
  return absl::OkStatus();
}

// Mean and 1 / sqrt(var + eps) of one row, accumulated in double.
inline void RowStats(const float* x, int64_t dim, float eps, float* mean, float* rstd) {
  double s = 0, s2 = 0;
  for (int64_t j = 0; j < dim; ++j) s += x[j];
  const double mu = s / static_cast<double>(dim);
  for (int64_t j = 0; j < dim; ++j) s2 += (x[j] - mu) * (x[j] - mu);
  *mean = static_cast<float>(mu);
  *rstd = static_cast<float>(1.0 / std::sqrt(s2 / static_cast<double>(dim) + eps));
}

absl::Status LayerNorm(KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& gamma = c.inputs[1];
  const Tensor& beta = c.inputs[2];
  int64_t rows, dim;
  if (absl::Status s = LastAxis(c, x, gamma, &rows, &dim); !s.ok()) return s;
  if (beta.NumElements() != dim) return c.Error(absl::StrCat("beta ", beta.shape().ToString(), " does not match ", x.shape().ToString()));
  const float eps = GetAttrF(*c.node, "epsilon", 1e-5f);
  Tensor y(DT_FLOAT, x.shape());
  const float *px = x.data<float>(), *g = gamma.data<float>(), *bt = beta.data<float>();
  float* py = y.data<float>();
  auto work = [&](Eigen::Index begin, Eigen::Index end) {
    for (Eigen::Index r = begin; r < end; ++r) {
      const float* in = px + r * dim;
      float* o = py + r * dim;
      float mean, rstd;
      RowStats(in, dim, eps, &mean, &rstd);
      for (int64_t j = 0; j < dim; ++j) o[j] = (in[j] - mean) * rstd * g[j] + bt[j];
    }
  };
  c.device->parallelFor(rows, Eigen::TensorOpCost(8 * dim, 4 * dim, 8 * dim), work);
  c.outputs = {y};
  return absl::OkStatus();
}

// With xhat = (x - mean) * rstd and g = dy * gamma over each row:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dgamma = sum of
// dy * xhat and dbeta = sum of dy over the rows.
absl::Status LayerNormGrad(KernelContext& c) {
  const Tensor& dy = c.inputs[0];
  const Tensor& x = c.inputs[1];
  const Tensor& gamma = c.inputs[2];
  int64_t rows, dim;
  if (absl::Status s = LastAxis(c, x, gamma, &rows, &dim); !s.ok()) return s;
  if (dy.shape() != x.shape()) return c.Error("dy and x differ in shape");
  const float eps = GetAttrF(*c.node, "epsilon", 1e-5f);
  Tensor dx(DT_FLOAT, x.shape()), dgamma(DT_FLOAT, gamma.shape()), dbeta(DT_FLOAT, gamma.shape());
  const float *px = x.data<float>(), *pdy = dy.data<float>(), *g = gamma.data<float>();
  float* pdx = dx.data<float>();
  // Per block of rows, partial sums of dgamma and dbeta, added up after.
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, 64));
  std::vector<double> partial(static_cast<size_t>(blocks * 2 * dim), 0.0);
  auto work = [&](Eigen::Index b0, Eigen::Index b1) {
    for (Eigen::Index b = b0; b < b1; ++b) {
      double* pg = partial.data() + b * 2 * dim;
      double* pb = pg + dim;
      for (int64_t r = b * rows / blocks; r < (b + 1) * rows / blocks; ++r) {
        const float* in = px + r * dim;
        const float* d = pdy + r * dim;
        float* o = pdx + r * dim;
        float mean, rstd;
        RowStats(in, dim, eps, &mean, &rstd);
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < dim; ++j) {
          const double xhat = (in[j] - mean) * rstd, gj = d[j] * g[j];
          mg += gj;
          mgx += gj * xhat;
          pg[j] += d[j] * xhat;
          pb[j] += d[j];
        }
        mg /= static_cast<double>(dim);
        mgx /= static_cast<double>(dim);
        for (int64_t j = 0; j < dim; ++j) {
          const double xhat = (in[j] - mean) * rstd;
          o[j] = static_cast<float>(rstd * (d[j] * g[j] - mg - xhat * mgx));
        }
      }
    }
  };
  if (rows > 0) c.device->parallelFor(blocks, Eigen::TensorOpCost(16 * dim, 8 * dim, 16 * dim * rows / blocks), work);
  for (int64_t j = 0; j < dim; ++j) {
    double sg = 0, sb = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      sg += partial[b * 2 * dim + j];
      sb += partial[b * 2 * dim + dim + j];
    }
    dgamma.data<float>()[j] = static_cast<float>(sg);
    dbeta.data<float>()[j] = static_cast<float>(sb);
  }
  c.outputs = {dx, dgamma, dbeta};
  return absl::OkStatus();
}

// The slice of `full` that begin/size name, checked; its shape in *dims.
absl::Status SliceOf(const KernelContext& c, const TensorShape& full, std::vector<int64_t>* begin,
                     std::vector<int64_t>* dims) {
  *begin = GetAttrInts(*c.node, "begin");
  const std::vector<int64_t> size = GetAttrInts(*c.node, "size");
  const int r = full.rank();
  if (begin->size() != static_cast<size_t>(r) || size.size() != static_cast<size_t>(r)) {
    return c.Error(absl::StrCat("begin and size need ", r, " values each for ", full.ToString()));
  }
  dims->resize(r);
  for (int i = 0; i < r; ++i) {
    const int64_t b = (*begin)[i], s = size[i] < 0 ? full.dim(i) - b : size[i];
    if (b < 0 || b > full.dim(i) || s < 0 || b + s > full.dim(i) || size[i] < -1) {
      return c.Error(absl::StrCat("slice begin ", b, " size ", size[i], " of axis ", i, " does not fit ", full.ToString()));
    }
    (*dims)[i] = s;
  }
  return absl::OkStatus();
}

// Copies the slice (shape `dims` at `begin` of `full`) out of / into a
// full tensor: every slice row of the last axis is one memcpy.
void CopySlice(const TensorShape& full, const std::vector<int64_t>& begin, const std::vector<int64_t>& dims,
               const float* src, float* dst, bool into_full) {
  const int r = full.rank();
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  if (count == 0) return;
  if (r == 0) {
    *dst = *src;
    return;
  }
  std::vector<int64_t> stride(r, 1);
  for (int i = r - 2; i >= 0; --i) stride[i] = stride[i + 1] * full.dim(i + 1);
  const int64_t inner = dims[r - 1], rows = count / inner;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rest = row, off = begin[r - 1];
    for (int i = r - 2; i >= 0; --i) {
      off += (begin[i] + rest % dims[i]) * stride[i];
      rest /= dims[i];
    }
    if (into_full) {
      std::memcpy(dst + off, src + row * inner, inner * sizeof(float));
    } else {
      std::memcpy(dst + row * inner, src + off, inner * sizeof(float));
    }
  }
}

absl::Status Slice(KernelContext& c) {
  const Tensor& x = c.inputs[0];
  std::vector<int64_t> begin, dims;
  if (absl::Status s = SliceOf(c, x.shape(), &begin, &dims); !s.ok()) return s;
  Tensor out(DT_FLOAT, TensorShape(dims));
  CopySlice(x.shape(), begin, dims, x.data<float>(), out.data<float>(), false);
  c.outputs = {out};
  return absl::OkStatus();
}

absl::Status SliceGrad(KernelContext& c) {
  const Tensor& dy = c.inputs[0];
  const TensorShape& full = c.inputs[1].shape();
  std::vector<int64_t> begin, dims;
  if (absl::Status s = SliceOf(c, full, &begin, &dims); !s.ok()) return s;
  if (dy.shape().dims() != dims) return c.Error(absl::StrCat("dy ", dy.shape().ToString(), " is not the slice's shape"));
  Tensor dx(DT_FLOAT, full);
  AsVector(dx).setZero();
  CopySlice(full, begin, dims, dy.data<float>(), dx.data<float>(), true);
  c.outputs = {dx};
  return absl::OkStatus();
}

absl::Status BroadcastTo(KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const TensorShape& ref = c.inputs[1].shape();
  std::vector<int64_t> target = GetAttrInts(*c.node, "shape");
  for (int64_t& d : target) {
    if (d >= 0) continue;
    if (ref.rank() == 0) return c.Error("the reference input has no first dim");
    d = -d * ref.dim(0);
  }
  BroadcastPlan p;
  if (absl::Status s = PlanBroadcast(x.shape().dims(), target, &p); !s.ok() || p.out_shape != target) {
    return c.Error(absl::StrCat("input ", x.shape().ToString(), " does not broadcast to ", TensorShape(target).ToString()));
  }
  Tensor out(DT_FLOAT, TensorShape(target));
  // Each output cell takes x's cell at the plan's a-strides.
  const int rank = static_cast<int>(p.dims.size());
  const float* in = x.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < p.size; ++i) {
    int64_t rest = i, off = 0;
    for (int k = rank - 1; k >= 0; --k) {
      off += (rest % p.dims[k]) * p.stride_a[k];
      rest /= p.dims[k];
    }
    o[i] = in[off];
  }
  c.outputs = {out};
  return absl::OkStatus();
}

// y = f(x), f an Eigen expression of x's vector (vectorised, and split
// over the pool's threads).
template <typename F>
Kernel Unary(F f) {
  return [f](KernelContext& c) {
    Tensor& x = c.inputs[0];
    Tensor out(DT_FLOAT, x.shape());
    AsVector(out).device(*c.device) = f(AsVector(x), GetAttrF(*c.node, "exponent", 1.0f));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

// (dy, v) -> dy * f(v), v the forward input or output.
template <typename F>
Kernel GradOf(F f) {
  return [f](KernelContext& c) {
    Tensor& dy = c.inputs[0];
    Tensor& v = c.inputs[1];
    if (dy.shape() != v.shape()) return c.Error("dy and its forward value differ in shape");
    Tensor out(DT_FLOAT, v.shape());
    AsVector(out).device(*c.device) = AsVector(dy) * f(AsVector(v), GetAttrF(*c.node, "exponent", 1.0f));
    c.outputs = {out};
    return absl::OkStatus();
  };
}

constexpr float kTwoOverSqrtPi = 1.1283791670955126f;
constexpr float kRsqrt2 = 0.70710678118654752f;
constexpr float kRsqrt2Pi = 0.39894228040143268f;

}  // namespace

void RegisterCpuSequenceKernels(KernelRegistry* r) {
  r->Register("BatchMatMul", BatchMatMul);
  r->Register("LayerNorm", LayerNorm);
  r->Register("LayerNormGrad", LayerNormGrad);
  r->Register("Slice", Slice);
  r->Register("SliceGrad", SliceGrad);
  r->Register("BroadcastTo", BroadcastTo);
  // Eigen's float erf is a rational approximation (to about 1 ulp), as
  // TensorFlow's; std::erf per element cost 5 % of a transformer's step.
  r->Register("Erf", Unary([](UMap<1> x, float) { return x.erf(); }));
  r->Register("ErfGrad", GradOf([](UMap<1> x, float) { return (-x.square()).exp() * kTwoOverSqrtPi; }));
  r->Register("Gelu", Unary([](UMap<1> x, float) { return x * ((x * kRsqrt2).erf() + 1.0f) * 0.5f; }));
  // d/dx x Phi(x) = Phi(x) + x phi(x).
  r->Register("GeluGrad", GradOf([](UMap<1> x, float) {
    return ((x * kRsqrt2).erf() + 1.0f) * 0.5f + x * (x.square() * -0.5f).exp() * kRsqrt2Pi;
  }));
  r->Register("Sqrt", Unary([](UMap<1> x, float) { return x.sqrt(); }));
  r->Register("SqrtGrad", GradOf([](UMap<1> y, float) { return y.inverse() * 0.5f; }));
  r->Register("Pow", [](KernelContext& c) {
    const float e = GetAttrF(*c.node, "exponent", 1.0f);
    if (e == 2.0f) return Unary([](UMap<1> x, float) { return x.square(); })(c);
    return Unary([](UMap<1> x, float e) { return x.pow(e); })(c);
  });
  r->Register("PowGrad", [](KernelContext& c) {
    const float e = GetAttrF(*c.node, "exponent", 1.0f);
    if (e == 2.0f) return GradOf([](UMap<1> x, float) { return x * 2.0f; })(c);
    return GradOf([](UMap<1> x, float e) { return x.pow(e - 1.0f) * e; })(c);
  });
}

}  // namespace psrt
