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
  explicit Sgd(const SgdOptimizer&) {}
  std::string name() const override { return "sgd"; }
  std::vector<std::string> slot_names() const override { return {}; }
  void Apply(float* var, const float* grad, int64_t n, float* const*, int64_t t) const override {
    Arr(var, n) -= LearningRate(t) * CArr(grad, n);
  }

 private:
};

class Momentum : public Optimizer {
 public:
  explicit Momentum(const MomentumOptimizer& d)
      : m_(d.momentum()), nesterov_(d.nesterov()) {}
  std::string name() const override { return nesterov_ ? "nesterov" : "momentum"; }
  std::vector<std::string> slot_names() const override { return {"momentum"}; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t t) const override {
    Arr v(var, n), accum(slots[0], n);
    CArr g(grad, n);
    const float lr = LearningRate(t);
    accum = m_ * accum + g;
    if (nesterov_) {
      v -= lr * (g + m_ * accum);
    } else {
      v -= lr * accum;
    }
  }

 private:
  const float m_;
  const bool nesterov_;
};

class Adagrad : public Optimizer {
 public:
  explicit Adagrad(const AdagradOptimizer& d)
      : init_(Or(d.initial_accumulator(), 0.1f)) {}
  std::string name() const override { return "adagrad"; }
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }
  float slot_initial_value(int) const override { return init_; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t t) const override {
    Arr v(var, n), accum(slots[0], n);
    CArr g(grad, n);
    accum += g.square();
    v -= LearningRate(t) * g / (accum.sqrt() + 1e-7f);
  }

 private:
  const float init_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(const AdamOptimizer& d)
      : b1_(Or(d.beta1(), 0.9f)),
        b2_(Or(d.beta2(), 0.999f)),
        eps_(Or(d.epsilon(), 1e-7f)) {}
  std::string name() const override { return "adam"; }
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t t) const override {
    Arr v(var, n), m(slots[0], n), s(slots[1], n);
    CArr g(grad, n);
    double tt = static_cast<double>(std::max<int64_t>(t, 1));
    float lr_t = static_cast<float>(LearningRate(t) * std::sqrt(1 - std::pow(b2_, tt)) / (1 - std::pow(b1_, tt)));
    m = b1_ * m + (1 - b1_) * g;
    s = b2_ * s + (1 - b2_) * g.square();
    v -= lr_t * m / (s.sqrt() + eps_);
  }

 private:
  const float b1_, b2_, eps_;
};

// Keras' AdamW (keras.optimizers.AdamW, Keras 3): first the decoupled
// decay the base optimizer applies before each update step,
// var -= var * weight_decay * lr (lr the scheduled rate of this update),
// then Adam's step exactly as keras/src/optimizers/adam.py writes it:
// m += (g - m) * (1 - b1); v += (g^2 - v) * (1 - b2);
// var -= m * alpha / (sqrt(v) + eps), alpha = lr * sqrt(1 - b2^t) / (1 - b1^t).
class AdamW : public Optimizer {
 public:
  explicit AdamW(const AdamWOptimizer& d)
      : b1_(Or(d.beta1(), 0.9f)),
        b2_(Or(d.beta2(), 0.999f)),
        eps_(Or(d.epsilon(), 1e-7f)),
        wd_(d.has_weight_decay() ? d.weight_decay() : 0.004f) {}
  std::string name() const override { return "adamw"; }
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t t) const override {
    Arr v(var, n), m(slots[0], n), s(slots[1], n);
    CArr g(grad, n);
    const float lr = LearningRate(t);
    if (wd_ != 0) v -= v * wd_ * lr;
    const double tt = static_cast<double>(std::max<int64_t>(t, 1));
    const float alpha = static_cast<float>(lr * std::sqrt(1 - std::pow(b2_, tt)) / (1 - std::pow(b1_, tt)));
    m += (g - m) * (1 - b1_);
    s += (g.square() - s) * (1 - b2_);
    v -= m * alpha / (s.sqrt() + eps_);
  }

 private:
  const float b1_, b2_, eps_, wd_;
};

// Keras' RMSprop (keras/src/optimizers/rmsprop.py):
// velocity = rho * velocity + (1 - rho) * g^2;
// centered: average_gradient = rho * average_gradient + (1 - rho) * g and
// denominator = velocity - average_gradient^2 + eps, else velocity + eps;
// increment = lr * g / sqrt(denominator);
// with momentum: momentum = momentum * momentum_slot + increment,
// var -= momentum; without: var -= increment. (eps inside the root, as
// Keras has it; TF1's RMSPropOptimizer added it to the squares too.)
class Rmsprop : public Optimizer {
 public:
  explicit Rmsprop(const RmspropOptimizer& d)
      : rho_(Or(d.rho(), 0.9f)),
        momentum_(d.momentum()),
        eps_(Or(d.epsilon(), 1e-7f)),
        centered_(d.centered()) {}
  std::string name() const override { return "rmsprop"; }
  // Keras' names, in the order Keras' build() adds them.
  std::vector<std::string> slot_names() const override {
    std::vector<std::string> names = {"velocity"};
    if (momentum_ > 0) names.push_back("momentum");
    if (centered_) names.push_back("average_gradient");
    return names;
  }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t t) const override {
    Arr v(var, n), velocity(slots[0], n);
    CArr g(grad, n);
    const float lr = LearningRate(t);
    velocity = rho_ * velocity + (1 - rho_) * g.square();
    float* mom = momentum_ > 0 ? slots[1] : nullptr;
    if (centered_) {
      Arr avg(slots[momentum_ > 0 ? 2 : 1], n);
      avg = rho_ * avg + (1 - rho_) * g;
      if (mom == nullptr) {
        v -= lr * g / (velocity - avg.square() + eps_).sqrt();
      } else {
        Arr m(mom, n);
        m = momentum_ * m + lr * g / (velocity - avg.square() + eps_).sqrt();
        v -= m;
      }
    } else if (mom == nullptr) {
      v -= lr * g / (velocity + eps_).sqrt();
    } else {
      Arr m(mom, n);
      m = momentum_ * m + lr * g / (velocity + eps_).sqrt();
      v -= m;
    }
  }

 private:
  const float rho_, momentum_, eps_;
  const bool centered_;
};

class Ftrl : public Optimizer {
 public:
  explicit Ftrl(const FtrlOptimizer& d)
      : power_(Or(d.learning_rate_power(), -0.5f)),
        init_(Or(d.initial_accumulator(), 0.1f)),
        l1_(d.l1()),
        l2_(d.l2()) {}
  std::string name() const override { return "ftrl"; }
  std::vector<std::string> slot_names() const override { return {"accumulator", "linear"}; }
  float slot_initial_value(int i) const override { return i == 0 ? init_ : 0.0f; }
  void Apply(float* var, const float* grad, int64_t n, float* const* slots, int64_t t) const override {
    const float lr = LearningRate(t);
    // Two loops, the power chosen outside them: the default power's loop
    // has no call or branch in it and vectorises (see copts in BUILD).
    if (power_ == -0.5f) {
      Loop(var, grad, n, slots[0], slots[1], lr, [](float a) { return std::sqrt(a); });
    } else {
      Loop(var, grad, n, slots[0], slots[1], lr, [p = -power_](float a) { return std::pow(a, p); });
    }
  }

 private:
  template <typename Pow>
  void Loop(float* __restrict var, const float* __restrict grad, int64_t n, float* __restrict accum,
            float* __restrict linear, float lr, Pow pow) const {
    const float l1 = l1_, l2 = l2_;
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i];
      const float a_new = accum[i] + g * g;
      const float p_new = pow(a_new), p_old = pow(accum[i]);
      const float sigma = (p_new - p_old) / lr;
      const float l = linear[i] + (g - sigma * var[i]);
      linear[i] = l;
      const float quadratic = p_new / lr + 2 * l2;
      const float w = (std::copysign(l1, l) - l) / quadratic;  // always: a blend, no branch
      var[i] = std::fabs(l) > l1 ? w : 0.0f;
      accum[i] = a_new;
    }
  }
  const float power_, init_, l1_, l2_;
};

absl::Status CheckLr(float lr, absl::string_view opt) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", opt, ".learning_rate must be positive, got ", lr));
  }
  return absl::OkStatus();
}

absl::Status CheckUnit(float v, absl::string_view field) {
  if (!(v >= 0 && v < 1)) {  // NaN too
    return absl::InvalidArgumentError(absl::StrCat(field, " must be in [0, 1), got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckNonNegative(float v, absl::string_view field) {
  if (!(v >= 0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be >= 0 and finite, got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateRule(const OptimizerDef& def) {
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
    case OptimizerDef::kAdamw: {
      const AdamWOptimizer& d = def.adamw();
      if (auto s = CheckLr(d.learning_rate(), "adamw"); !s.ok()) return s;
      if (auto s = CheckUnit(d.beta1(), "optimizer.adamw.beta1"); !s.ok()) return s;
      if (auto s = CheckUnit(d.beta2(), "optimizer.adamw.beta2"); !s.ok()) return s;
      if (auto s = CheckNonNegative(d.epsilon(), "optimizer.adamw.epsilon"); !s.ok()) return s;
      if (auto s = CheckNonNegative(d.weight_decay(), "optimizer.adamw.weight_decay"); !s.ok()) return s;
      return std::unique_ptr<Optimizer>(new AdamW(d));
    }
    case OptimizerDef::kRmsprop: {
      const RmspropOptimizer& d = def.rmsprop();
      if (auto s = CheckLr(d.learning_rate(), "rmsprop"); !s.ok()) return s;
      if (auto s = CheckUnit(d.rho(), "optimizer.rmsprop.rho"); !s.ok()) return s;
      if (auto s = CheckUnit(d.momentum(), "optimizer.rmsprop.momentum"); !s.ok()) return s;
      if (auto s = CheckNonNegative(d.epsilon(), "optimizer.rmsprop.epsilon"); !s.ok()) return s;
      return std::unique_ptr<Optimizer>(new Rmsprop(d));
    }
    default:
      return absl::InvalidArgumentError(
          "optimizer: none given (set one of sgd, momentum, adagrad, adam, adamw, rmsprop, ftrl)");
  }
}

float BaseLearningRate(const OptimizerDef& def) {
  switch (def.kind_case()) {
    case OptimizerDef::kSgd: return def.sgd().learning_rate();
    case OptimizerDef::kMomentum: return def.momentum().learning_rate();
    case OptimizerDef::kAdagrad: return def.adagrad().learning_rate();
    case OptimizerDef::kAdam: return def.adam().learning_rate();
    case OptimizerDef::kFtrl: return def.ftrl().learning_rate();
    case OptimizerDef::kAdamw: return def.adamw().learning_rate();
    case OptimizerDef::kRmsprop: return def.rmsprop().learning_rate();
    default: return 0;
  }
}

absl::Status CheckSchedule(const LearningRateSchedule& s) {
  if (s.warmup_steps() < 0) return absl::InvalidArgumentError("optimizer.schedule.warmup_steps must be >= 0");
  if (s.kind() == LearningRateSchedule::CONSTANT) return absl::OkStatus();
  if (s.decay_steps() <= 0) {
    return absl::InvalidArgumentError("optimizer.schedule.decay_steps must be positive (0 is filled in by the chief)");
  }
  if (s.kind() == LearningRateSchedule::STEP && !(s.decay_rate() > 0 && s.decay_rate() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.schedule.decay_rate must be in (0, 1], got ", s.decay_rate()));
  }
  if (s.kind() == LearningRateSchedule::COSINE) return CheckUnit(s.min_fraction(), "optimizer.schedule.min_fraction");
  if (s.kind() != LearningRateSchedule::STEP) return absl::InvalidArgumentError("optimizer.schedule.kind is unknown");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerDef& def) {
  absl::StatusOr<std::unique_ptr<Optimizer>> rule = CreateRule(def);
  if (!rule.ok()) return rule.status();
  if (auto s = CheckSchedule(def.schedule()); !s.ok()) return s;
  (*rule)->base_lr_ = BaseLearningRate(def);
  (*rule)->schedule_ = def.schedule();
  return rule;
}

float Optimizer::LearningRate(int64_t t) const {
  const LearningRateSchedule& s = schedule_;
  const int64_t warmup = s.warmup_steps();
  if (warmup > 0 && t < warmup) return base_lr_ * static_cast<float>(std::max<int64_t>(t, 1)) / warmup;
  const double after = static_cast<double>(t - warmup);
  switch (s.kind()) {
    case LearningRateSchedule::STEP:
      return base_lr_ * static_cast<float>(std::pow(s.decay_rate(), std::floor(after / s.decay_steps())));
    case LearningRateSchedule::COSINE: {
      const double p = std::min(1.0, std::max(0.0, after / s.decay_steps()));
      return base_lr_ * static_cast<float>(s.min_fraction() + (1 - s.min_fraction()) * 0.5 * (1 + std::cos(M_PI * p)));
    }
    default:
      return base_lr_;
  }
}

OptimizerDef ResolveSchedule(OptimizerDef def, int64_t total_updates) {
  LearningRateSchedule* s = def.mutable_schedule();
  if (s->kind() != LearningRateSchedule::CONSTANT && s->decay_steps() == 0) {
    s->set_decay_steps(std::max<int64_t>(1, total_updates - s->warmup_steps()));
  }
  if (def.schedule().ByteSizeLong() == 0) def.clear_schedule();
  return def;
}

}  // namespace psrt
