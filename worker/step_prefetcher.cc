#include "worker/step_prefetcher.h"

namespace psrt {

void StepPrefetcher::Start(int64_t step, int64_t tag) {
  Drop();
  pending_ = true;
  step_ = step;
  tag_ = tag;
  inputs_ = StepInputs();
  thread_ = std::thread([this, step] { fetch_(step, &inputs_); });
}

std::optional<StepInputs> StepPrefetcher::Take(int64_t step, int64_t tag) {
  if (!pending_) return std::nullopt;
  if (thread_.joinable()) thread_.join();
  pending_ = false;
  if (step != step_ || tag != tag_) return std::nullopt;
  return std::move(inputs_);
}

void StepPrefetcher::Drop() {
  if (thread_.joinable()) thread_.join();
  pending_ = false;
}

}  // namespace psrt
