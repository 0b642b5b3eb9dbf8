#include "common/compute/clipping_step_runner.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/compute/gradient_clipping.h"

namespace psrt {
namespace {

// One tensor clipped by clipnorm or clipvalue (whichever is set).
absl::StatusOr<Tensor> ClipOne(const GradientClipping& clip, const Tensor& t) {
  if (clip.clipnorm() > 0) return ClipByNorm(t, clip.clipnorm());
  if (clip.clipvalue() > 0) return ClipByValue(t, clip.clipvalue());
  return t;
}

absl::Status Named(const std::string& variable, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("gradient of ", variable, ": ", s.message()));
}

class ClippingStepRunner : public StepRunner {
 public:
  ClippingStepRunner(std::unique_ptr<StepRunner> inner, const GradientClipping& clip, std::set<std::string> unclipped)
      : inner_(std::move(inner)), clip_(clip), unclipped_(std::move(unclipped)) {}

  std::vector<std::string> DenseVariables() const override { return inner_->DenseVariables(); }
  absl::StatusOr<RowRequest> SparseRows(const Batch& batch) const override { return inner_->SparseRows(batch); }
  std::string device() const override { return inner_->device(); }

  absl::StatusOr<StepResult> Run(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                 int64_t step) override {
    absl::StatusOr<StepResult> r = inner_->Run(dense, rows, batch, step);
    if (!r.ok()) return r;
    if (absl::Status s = ClipStepGradients(clip_, &*r, unclipped_); !s.ok()) return s;
    return r;
  }

  absl::StatusOr<StepResult> RunStreaming(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                          int64_t step, const GradientReady& ready) override {
    if (clip_.global_clipnorm() > 0) return RunHeld(dense, rows, batch, step, ready);
    // Per tensor: each gradient goes on clipped as soon as it is final. One
    // that cannot be clipped is not handed over and fails the step.
    absl::Status failed;
    absl::StatusOr<StepResult> r =
        inner_->RunStreaming(dense, rows, batch, step, [&](const std::string& v, const Tensor& g) {
          if (!failed.ok()) return;
          if (unclipped_.count(v)) {
            ready(v, g);
            return;
          }
          absl::StatusOr<Tensor> c = ClipOne(clip_, g);
          if (!c.ok()) {
            failed = Named(v, c.status());
            return;
          }
          ready(v, *c);
        });
    if (!r.ok()) return r;
    if (!failed.ok()) return failed;
    if (absl::Status s = ClipStepGradients(clip_, &*r, unclipped_); !s.ok()) return s;  // sparse ones, any not handed over
    return r;
  }

 private:
  // global_clipnorm: every gradient of the step is held until the last is
  // made, then all are scaled together and released in the order they came.
  absl::StatusOr<StepResult> RunHeld(const TensorMap& dense, const TensorMap& rows, const Batch& batch, int64_t step,
                                     const GradientReady& ready) {
    std::vector<std::pair<std::string, Tensor>> held;
    absl::StatusOr<StepResult> r = inner_->RunStreaming(
        dense, rows, batch, step, [&](const std::string& v, const Tensor& g) { held.emplace_back(v, g); });
    if (!r.ok()) return r;
    std::vector<Tensor*> all;
    for (auto& [v, g] : held) {
      if (!unclipped_.count(v)) all.push_back(&g);
    }
    for (auto& [v, g] : r->dense_gradients) {
      if (!unclipped_.count(v)) all.push_back(&g);
    }
    for (auto& [v, ids_rows] : r->sparse_gradients) all.push_back(&ids_rows.second);
    absl::StatusOr<double> norm = ClipByGlobalNorm(all, clip_.global_clipnorm());
    if (!norm.ok()) return norm.status();
    for (const auto& [v, g] : held) ready(v, g);
    return r;
  }

  const std::unique_ptr<StepRunner> inner_;
  const GradientClipping clip_;
  const std::set<std::string> unclipped_;  // moving-average variables
};

}  // namespace

absl::Status ClipStepGradients(const GradientClipping& clip, StepResult* result,
                               const std::set<std::string>& unclipped) {
  if (clip.global_clipnorm() > 0) {
    std::vector<Tensor*> all;
    for (auto& [v, g] : result->dense_gradients) {
      if (!unclipped.count(v)) all.push_back(&g);
    }
    for (auto& [v, ids_rows] : result->sparse_gradients) all.push_back(&ids_rows.second);
    return ClipByGlobalNorm(all, clip.global_clipnorm()).status();
  }
  if (clip.clipnorm() <= 0 && clip.clipvalue() <= 0) return absl::OkStatus();
  for (auto& [v, g] : result->dense_gradients) {
    if (unclipped.count(v)) continue;
    absl::StatusOr<Tensor> c = ClipOne(clip, g);
    if (!c.ok()) return Named(v, c.status());
    g = *std::move(c);
  }
  for (auto& [v, ids_rows] : result->sparse_gradients) {
    absl::StatusOr<Tensor> c = ClipOne(clip, ids_rows.second);
    if (!c.ok()) return Named(v, c.status());
    ids_rows.second = *std::move(c);
  }
  return absl::OkStatus();
}

std::unique_ptr<StepRunner> MaybeClipGradients(std::unique_ptr<StepRunner> runner, const GradientClipping& clip,
                                               std::set<std::string> unclipped) {
  if (!ClippingEnabled(clip)) return runner;
  return std::make_unique<ClippingStepRunner>(std::move(runner), clip, std::move(unclipped));
}

std::unique_ptr<StepRunner> MaybeClipGradients(std::unique_ptr<StepRunner> runner, const WorkerAssignment& a) {
  std::set<std::string> moving;
  for (const VariablePlacement& vp : a.placement().variable()) {
    if (vp.variable().has_moving_average()) moving.insert(vp.variable().name());
  }
  return MaybeClipGradients(std::move(runner), a.clip(), std::move(moving));
}

}  // namespace psrt
