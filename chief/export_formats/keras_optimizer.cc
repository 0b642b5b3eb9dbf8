#include "chief/export_formats/keras_optimizer.h"

#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "chief/export_formats/keras_checkpoint.h"
#include "common/json_string.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

float Or(float v, float fallback) { return v == 0 ? fallback : v; }

std::string Num(double v) { return absl::StrFormat("%.9g", v); }
std::string NumOrNull(float v) { return v == 0 ? "null" : Num(v); }

// How psrt's slots become Keras' variables.
struct Mapping {
  std::string class_name;  // "Adam"
  std::string name;        // "adam"
  float learning_rate = 0;
  std::string specific_json;  // the class's own config fields, after the base ones
  // Keras' slot kinds, each the psrt slot index and a factor; `interleaved`:
  // Keras adds them per variable (Adam), else per kind (RMSprop).
  std::vector<std::pair<int, float>> slots;
  bool interleaved = false;
  float weight_decay = 0;  // AdamW
};

absl::Status Refused(const std::string& optimizer, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat("--include_optimizer: cannot export the optimizer ", optimizer,
                                                    ": ", why,
                                                    " (export without --include_optimizer for the weights alone)"));
}

absl::StatusOr<Mapping> MapOptimizer(const OptimizerDef& def) {
  // A constant rate with no warm-up (or an empty schedule {}) is no schedule.
  if (def.schedule().kind() != LearningRateSchedule::CONSTANT || def.schedule().warmup_steps() > 0) {
    const auto* kind = def.GetDescriptor()->FindFieldByNumber(def.kind_case());
    return Refused(absl::StrCat(kind == nullptr ? "(none)" : kind->name(), " with a learning-rate schedule"),
                   "psrt evaluates the schedule at the update's own 1-based count and Keras at the count before "
                   "the update, so Keras would train on at another rate");
  }
  Mapping m;
  switch (def.kind_case()) {
    case OptimizerDef::kSgd:
      m = {"SGD", "sgd", def.sgd().learning_rate(), "\"momentum\": 0.0, \"nesterov\": false", {}, false};
      return m;
    case OptimizerDef::kMomentum: {
      const MomentumOptimizer& d = def.momentum();
      m = {"SGD",
           "sgd",
           d.learning_rate(),
           absl::StrCat("\"momentum\": ", Num(d.momentum()), ", \"nesterov\": ", d.nesterov() ? "true" : "false"),
           {},
           false};
      // Keras' SGD keeps no slot at momentum 0 (and psrt's accumulator is
      // then the last gradient, which the next update does not read).
      if (d.momentum() > 0) m.slots = {{0, -d.learning_rate()}};
      return m;
    }
    case OptimizerDef::kAdam: {
      const AdamOptimizer& d = def.adam();
      m = {"Adam",
           "adam",
           d.learning_rate(),
           absl::StrCat("\"beta_1\": ", Num(Or(d.beta1(), 0.9f)), ", \"beta_2\": ", Num(Or(d.beta2(), 0.999f)),
                        ", \"epsilon\": ", Num(Or(d.epsilon(), 1e-7f)), ", \"amsgrad\": false"),
           {{0, 1.0f}, {1, 1.0f}},
           true};
      return m;
    }
    case OptimizerDef::kAdamw: {
      const AdamWOptimizer& d = def.adamw();
      m = {"AdamW",
           "adam_w",
           d.learning_rate(),
           absl::StrCat("\"beta_1\": ", Num(Or(d.beta1(), 0.9f)), ", \"beta_2\": ", Num(Or(d.beta2(), 0.999f)),
                        ", \"epsilon\": ", Num(Or(d.epsilon(), 1e-7f)), ", \"amsgrad\": false"),
           {{0, 1.0f}, {1, 1.0f}},
           true};
      m.weight_decay = d.has_weight_decay() ? d.weight_decay() : 0.004f;
      return m;
    }
    case OptimizerDef::kRmsprop: {
      const RmspropOptimizer& d = def.rmsprop();
      m = {"RMSprop",
           "rmsprop",
           d.learning_rate(),
           absl::StrCat("\"rho\": ", Num(Or(d.rho(), 0.9f)), ", \"momentum\": ", Num(d.momentum()), ", \"epsilon\": ",
                        Num(Or(d.epsilon(), 1e-7f)), ", \"centered\": ", d.centered() ? "true" : "false"),
           {{0, 1.0f}},
           false};
      // psrt's slots: velocity, momentum (momentum > 0), average_gradient
      // (centered): Keras' kinds in Keras' order.
      int next = 1;
      if (d.momentum() > 0) m.slots.push_back({next++, 1.0f});
      if (d.centered()) m.slots.push_back({next++, 1.0f});
      return m;
    }
    case OptimizerDef::kAdagrad:
      return Refused("adagrad",
                     "psrt's update is lr*g/(sqrt(accumulator)+1e-7), Keras' Adagrad lr*g/sqrt(accumulator+epsilon)");
    case OptimizerDef::kFtrl:
      return Refused("ftrl", "psrt's FTRL-proximal (TF's ApplyFtrl) is not checked against Keras' Ftrl");
    default:
      return Refused("(none)", "the job has no optimizer");
  }
}

// The activation of the model's last layer (the one psrt folds into a
// cross-entropy loss, whose Keras model then outputs probabilities).
Activation LastActivation(const TrainingJob& job) {
  const auto& layers = job.model().sequential().layer();
  if (layers.empty()) return Activation();
  const LayerDef& l = layers[layers.size() - 1];
  switch (l.kind_case()) {
    case LayerDef::kDense:
      return l.dense().activation();
    case LayerDef::kConv2D:
      return l.conv2d().activation();
    case LayerDef::kActivation:
      return l.activation().activation();
    default:
      return Activation();
  }
}

absl::StatusOr<std::string> LossJson(const TrainingJob& job) {
  const LossDef& loss = job.model().loss();
  const Activation last = LastActivation(job);
  switch (loss.kind()) {
    case LossDef::SOFTMAX_CROSS_ENTROPY:
      if (loss.label_smoothing() != 0) {
        return absl::FailedPreconditionError(
            "--include_optimizer: the loss softmax cross-entropy with label_smoothing has no Keras equivalent "
            "for integer labels (SparseCategoricalCrossentropy has no label_smoothing)");
      }
      return absl::StrCat(
          "{\"module\": \"keras.losses\", \"class_name\": \"SparseCategoricalCrossentropy\", \"config\": "
          "{\"name\": \"sparse_categorical_crossentropy\", \"reduction\": \"sum_over_batch_size\", "
          "\"from_logits\": ",
          last == SOFTMAX ? "false" : "true", ", \"ignore_class\": null}, \"registered_name\": null}");
    case LossDef::SIGMOID_CROSS_ENTROPY:
      return absl::StrCat(
          "{\"module\": \"keras.losses\", \"class_name\": \"BinaryCrossentropy\", \"config\": "
          "{\"name\": \"binary_crossentropy\", \"reduction\": \"sum_over_batch_size\", \"from_logits\": ",
          last == SIGMOID ? "false" : "true", ", \"label_smoothing\": ", Num(loss.label_smoothing()),
          ", \"axis\": -1}, \"registered_name\": null}");
    case LossDef::MEAN_SQUARED_ERROR:
      return std::string(
          "{\"module\": \"keras.losses\", \"class_name\": \"MeanSquaredError\", \"config\": "
          "{\"name\": \"mean_squared_error\", \"reduction\": \"sum_over_batch_size\"}, \"registered_name\": null}");
    default:
      return absl::FailedPreconditionError(
          absl::StrCat("--include_optimizer: no Keras loss for loss kind ", LossDef::Kind_Name(loss.kind())));
  }
}

}  // namespace

absl::Status CheckKerasOptimizer(const TrainingJob& job) {
  RETURN_IF_ERROR(MapOptimizer(job.optimizer()).status());
  return LossJson(job).status();
}

absl::StatusOr<KerasOptimizerState> KerasOptimizer(const TrainingJob& job, const CheckpointSlots& ckpt) {
  ASSIGN_OR_RETURN(Mapping m, MapOptimizer(job.optimizer()));
  ASSIGN_OR_RETURN(std::string loss, LossJson(job));
  ASSIGN_OR_RETURN(std::vector<KerasLayer> layers, KerasLayers(job));

  // The model's trainable variables in Keras' order: layer by layer,
  // kernel then bias (as in the weights file).
  std::vector<const VariableState*> trainable;
  for (const KerasLayer& layer : layers) {
    for (const auto& [attribute, variable] : layer.variables) {
      auto it = ckpt.states.find(variable);
      if (it == ckpt.states.end()) {
        return absl::NotFoundError(absl::StrCat("the checkpoint has no variable ", variable));
      }
      trainable.push_back(&it->second);
    }
  }
  // Keras has one iteration count; psrt one per variable.
  int64_t updates = trainable.empty() ? 0 : trainable.front()->updates;
  for (const VariableState* s : trainable) {
    if (s->updates != updates) {
      return absl::FailedPreconditionError(absl::StrCat("--include_optimizer: variable ", s->def.name(), " has had ",
                                                        s->updates, " updates and ", trainable.front()->def.name(), " ",
                                                        updates, "; Keras keeps one iteration count for all"));
    }
    for (const auto& [slot, factor] : m.slots) {
      if (slot >= static_cast<int>(s->slots.size()) || s->slots[slot].dtype() != DT_FLOAT ||
          s->slots[slot].shape() != s->value.shape()) {
        return absl::FailedPreconditionError(absl::StrCat("variable ", s->def.name(), " has no slot ", slot,
                                                          " of its shape (another optimizer's checkpoint?)"));
      }
    }
  }

  KerasOptimizerState out;
  out.name = m.name;
  out.variables.push_back(Tensor::Scalar<int64_t>(updates));
  out.variables.push_back(Tensor::Scalar<float>(m.learning_rate));
  auto scaled = [](const Tensor& t, float factor) {
    if (factor == 1.0f) return t;
    Tensor copy(DT_FLOAT, t.shape());
    const float* in = t.data<float>();
    float* o = copy.data<float>();
    for (int64_t i = 0; i < t.NumElements(); ++i) o[i] = factor * in[i];
    return copy;
  };
  if (m.interleaved) {
    for (const VariableState* s : trainable) {
      for (const auto& [slot, factor] : m.slots) out.variables.push_back(scaled(s->slots[slot], factor));
    }
  } else {
    for (const auto& [slot, factor] : m.slots) {
      for (const VariableState* s : trainable) out.variables.push_back(scaled(s->slots[slot], factor));
    }
  }

  const OptimizerDef& def = job.optimizer();
  const std::string optimizer = absl::StrCat(
      "{\"module\": \"keras.optimizers\", \"class_name\": \"", m.class_name, "\", \"config\": {\"name\": \"", m.name,
      "\", \"learning_rate\": ", Num(m.learning_rate),
      ", \"weight_decay\": ", m.class_name == "AdamW" ? Num(m.weight_decay) : "null",
      ", \"clipnorm\": ", NumOrNull(def.clipnorm()), ", \"global_clipnorm\": ", NumOrNull(def.global_clipnorm()),
      ", \"clipvalue\": ", NumOrNull(def.clipvalue()),
      ", \"use_ema\": false, \"ema_momentum\": 0.99, \"ema_overwrite_frequency\": null, \"loss_scale_factor\": null, "
      "\"gradient_accumulation_steps\": null, ",
      m.specific_json, "}, \"registered_name\": null}");
  std::vector<std::string> metrics;
  for (const std::string& metric : job.model().metric()) metrics.push_back(JsonString(metric));
  out.compile_config_json =
      absl::StrCat("{\"optimizer\": ", optimizer, ", \"loss\": ", loss, ", \"loss_weights\": null, \"metrics\": ",
                   metrics.empty() ? "null" : absl::StrCat("[", absl::StrJoin(metrics, ", "), "]"),
                   ", \"weighted_metrics\": null, \"run_eagerly\": false, "
                   "\"steps_per_execution\": 1, \"jit_compile\": false}");
  return out;
}

}  // namespace psrt
