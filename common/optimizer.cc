#include "common/optimizer.h"

#include <cmath>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

using Arr = Eigen::Map<Eigen::ArrayXf>;
using CArr = Eigen::Map<const Eigen::ArrayXf>;

float Or(float v, float fallback) { return v == 0 ? fallback : v; }

class Sgd : public Optimizer {
 public:
  explicit Sgd(const SgdOptimizer& d) : lr_(d.learning_rate()) {}
  std::string name() const override { return "sgd"; }
  std::vector<std::string> slot_names() const override { return {}; }
  void Apply(float* var, const float* grad, int64_t n, float* const*, int64_t) const override {
    Arr(var, n) -= lr_ * CArr(grad, n);
  }

 private:
  const float lr_;
};

class Momentum : public Optimizer {
 public:
  explicit Momentum(const MomentumOptimizer& d)
      : lr_(d.learning_rate()), m_(d.momentum()), nesterov_(d.nesterov()) {}
  std::string name() const override { return nesterov_ ? "nesterov" : "momentum"; }
  std::vector<std::string> slot_names() const override { return {"momentum"}; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t) const override {
    Arr v(var, n), accum(slots[0], n);
    CArr g(grad, n);
    accum = m_ * accum + g;
    if (nesterov_) {
      v -= lr_ * (g + m_ * accum);
    } else {
      v -= lr_ * accum;
    }
  }

 private:
  const float lr_, m_;
  const bool nesterov_;
};

class Adagrad : public Optimizer {
 public:
  explicit Adagrad(const AdagradOptimizer& d)
      : lr_(d.learning_rate()), init_(Or(d.initial_accumulator(), 0.1f)) {}
  std::string name() const override { return "adagrad"; }
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }
  float slot_initial_value(int) const override { return init_; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t) const override {
    Arr v(var, n), accum(slots[0], n);
    CArr g(grad, n);
    accum += g.square();
    v -= lr_ * g / (accum.sqrt() + 1e-7f);
  }

 private:
  const float lr_, init_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(const AdamOptimizer& d)
      : lr_(d.learning_rate()),
        b1_(Or(d.beta1(), 0.9f)),
        b2_(Or(d.beta2(), 0.999f)),
        eps_(Or(d.epsilon(), 1e-7f)) {}
  std::string name() const override { return "adam"; }
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t t) const override {
    Arr v(var, n), m(slots[0], n), s(slots[1], n);
    CArr g(grad, n);
    double tt = static_cast<double>(std::max<int64_t>(t, 1));
    float lr_t = static_cast<float>(lr_ * std::sqrt(1 - std::pow(b2_, tt)) / (1 - std::pow(b1_, tt)));
    m = b1_ * m + (1 - b1_) * g;
    s = b2_ * s + (1 - b2_) * g.square();
    v -= lr_t * m / (s.sqrt() + eps_);
  }

 private:
  const float lr_, b1_, b2_, eps_;
};

class Ftrl : public Optimizer {
 public:
  explicit Ftrl(const FtrlOptimizer& d)
      : lr_(d.learning_rate()),
        power_(Or(d.learning_rate_power(), -0.5f)),
        init_(Or(d.initial_accumulator(), 0.1f)),
        l1_(d.l1()),
        l2_(d.l2()) {}
  std::string name() const override { return "ftrl"; }
  std::vector<std::string> slot_names() const override { return {"accumulator", "linear"}; }
  float slot_initial_value(int i) const override { return i == 0 ? init_ : 0.0f; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t) const override {
    float* accum = slots[0];
    float* linear = slots[1];
    for (int64_t i = 0; i < n; ++i) {
      float g = grad[i];
      float a_new = accum[i] + g * g;
      float p_new = Pow(a_new), p_old = Pow(accum[i]);
      float sigma = (p_new - p_old) / lr_;
      linear[i] += g - sigma * var[i];
      float quadratic = p_new / lr_ + 2 * l2_;
      float l = linear[i];
      var[i] = std::fabs(l) > l1_ ? (std::copysign(l1_, l) - l) / quadratic : 0.0f;
      accum[i] = a_new;
    }
  }

 private:
  float Pow(float a) const { return power_ == -0.5f ? std::sqrt(a) : std::pow(a, -power_); }
  const float lr_, power_, init_, l1_, l2_;
};

absl::Status CheckLr(float lr, absl::string_view opt) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", opt, ".learning_rate must be positive, got ", lr));
  }
  return absl::OkStatus();
}

absl::Status CheckUnit(float v, absl::string_view field) {
  if (v < 0 || v >= 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be in [0, 1), got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerDef& def) {
  switch (def.kind_case()) {
    case OptimizerDef::kSgd:
      if (auto s = CheckLr(def.sgd().learning_rate(), "sgd"); !s.ok()) return s;
      return std::unique_ptr<Optimizer>(new Sgd(def.sgd()));
    case OptimizerDef::kMomentum:
      if (auto s = CheckLr(def.momentum().learning_rate(), "momentum"); !s.ok()) return s;
      if (auto s = CheckUnit(def.momentum().momentum(), "optimizer.momentum.momentum"); !s.ok()) return s;
      return std::unique_ptr<Optimizer>(new Momentum(def.momentum()));
    case OptimizerDef::kAdagrad:
      if (auto s = CheckLr(def.adagrad().learning_rate(), "adagrad"); !s.ok()) return s;
      if (def.adagrad().initial_accumulator() < 0) {
        return absl::InvalidArgumentError("optimizer.adagrad.initial_accumulator must be >= 0");
      }
      return std::unique_ptr<Optimizer>(new Adagrad(def.adagrad()));
    case OptimizerDef::kAdam:
      if (auto s = CheckLr(def.adam().learning_rate(), "adam"); !s.ok()) return s;
      if (auto s = CheckUnit(def.adam().beta1(), "optimizer.adam.beta1"); !s.ok()) return s;
      if (auto s = CheckUnit(def.adam().beta2(), "optimizer.adam.beta2"); !s.ok()) return s;
      if (def.adam().epsilon() < 0) return absl::InvalidArgumentError("optimizer.adam.epsilon must be >= 0");
      return std::unique_ptr<Optimizer>(new Adam(def.adam()));
    case OptimizerDef::kFtrl:
      if (auto s = CheckLr(def.ftrl().learning_rate(), "ftrl"); !s.ok()) return s;
      if (def.ftrl().l1() < 0 || def.ftrl().l2() < 0) {
        return absl::InvalidArgumentError("optimizer.ftrl.l1 and l2 must be >= 0");
      }
      if (def.ftrl().learning_rate_power() > 0) {
        return absl::InvalidArgumentError("optimizer.ftrl.learning_rate_power must be <= 0");
      }
      return std::unique_ptr<Optimizer>(new Ftrl(def.ftrl()));
    default:
      return absl::InvalidArgumentError(
          "optimizer: none given (set one of sgd, momentum, adagrad, adam, ftrl)");
  }
}

}  // namespace psrt
