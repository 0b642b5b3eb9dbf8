#include "common/compute/gradient_clipping.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

absl::Status NotFloat(const Tensor& t) {
  return absl::InvalidArgumentError(
      absl::StrCat("gradient clipping takes float gradients, not ", DataTypeName(t.dtype())));
}

}  // namespace

GradientClipping ClippingOf(const OptimizerDef& optimizer) {
  GradientClipping c;
  c.set_clipnorm(optimizer.clipnorm());
  c.set_clipvalue(optimizer.clipvalue());
  c.set_global_clipnorm(optimizer.global_clipnorm());
  return c;
}

bool ClippingEnabled(const GradientClipping& clip) {
  return clip.clipnorm() != 0 || clip.clipvalue() != 0 || clip.global_clipnorm() != 0;
}

absl::Status CheckClipping(const GradientClipping& clip, absl::string_view prefix) {
  const std::pair<const char*, float> fields[] = {
      {"clipnorm", clip.clipnorm()}, {"clipvalue", clip.clipvalue()}, {"global_clipnorm", clip.global_clipnorm()}};
  const char* set = nullptr;
  for (const auto& [name, value] : fields) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ".", name, ": ", value, " is not a finite value >= 0 (0 = off)"));
    }
    if (value == 0) continue;
    if (set != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ".", name, ": set with ", prefix, ".", set, "; at most one clipping may be set"));
    }
    set = name;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> SquaredNorm(const Tensor& t) {
  if (t.dtype() != DT_FLOAT) return NotFloat(t);
  const float* d = t.data<float>();
  const int64_t n = t.NumElements();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(d[i]) * d[i];
  return sum;
}

absl::StatusOr<Tensor> ClipByNorm(const Tensor& t, float clip_norm) {
  absl::StatusOr<double> sq = SquaredNorm(t);
  if (!sq.ok()) return sq.status();
  // TensorFlow: t * c / max(norm, c), the product first, in float.
  const float norm = static_cast<float>(std::sqrt(*sq));
  if (norm <= clip_norm) return t;
  Tensor out(DT_FLOAT, t.shape());
  const float* in = t.data<float>();
  float* o = out.data<float>();
  const int64_t n = t.NumElements();
  for (int64_t i = 0; i < n; ++i) o[i] = (in[i] * clip_norm) / norm;
  return out;
}

absl::StatusOr<Tensor> ClipByValue(const Tensor& t, float clip_value) {
  if (t.dtype() != DT_FLOAT) return NotFloat(t);
  const float* in = t.data<float>();
  const int64_t n = t.NumElements();
  int64_t first = 0;
  while (first < n && in[first] >= -clip_value && in[first] <= clip_value) ++first;
  if (first == n) return t;  // nothing out of range
  Tensor out(DT_FLOAT, t.shape());
  float* o = out.data<float>();
  std::copy(in, in + first, o);
  // min(max(x, -c), c) keeps a NaN, as tf.clip_by_value does.
  for (int64_t i = first; i < n; ++i) o[i] = std::min(std::max(in[i], -clip_value), clip_value);
  return out;
}

float GlobalNormScale(double global_norm, float clip_norm) {
  const float norm = static_cast<float>(global_norm);
  if (!std::isfinite(norm)) return std::numeric_limits<float>::quiet_NaN();
  if (norm <= clip_norm) return 1.0f;
  // TensorFlow: c * min(1 / norm, 1 / c), in float.
  return clip_norm * (1.0f / norm);
}

absl::StatusOr<Tensor> ScaleTensor(const Tensor& t, float scale) {
  if (t.dtype() != DT_FLOAT) return NotFloat(t);
  if (scale == 1.0f) return t;
  Tensor out(DT_FLOAT, t.shape());
  const float* in = t.data<float>();
  float* o = out.data<float>();
  const int64_t n = t.NumElements();
  for (int64_t i = 0; i < n; ++i) o[i] = in[i] * scale;
  return out;
}

absl::StatusOr<double> ClipByGlobalNorm(const std::vector<Tensor*>& tensors, float clip_norm) {
  double sum = 0;
  for (const Tensor* t : tensors) {
    absl::StatusOr<double> sq = SquaredNorm(*t);
    if (!sq.ok()) return sq.status();
    sum += *sq;
  }
  const double norm = std::sqrt(sum);
  const float scale = GlobalNormScale(norm, clip_norm);
  if (scale == 1.0f) return norm;
  for (Tensor* t : tensors) {
    absl::StatusOr<Tensor> scaled = ScaleTensor(*t, scale);
    if (!scaled.ok()) return scaled.status();
    *t = *std::move(scaled);
  }
  return norm;
}

}  // namespace psrt
