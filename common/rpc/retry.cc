#include "common/rpc/retry.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace psrt {

absl::Duration Backoff::NextDelay() {
  double base = absl::ToDoubleSeconds(options_.initial) *
                std::pow(options_.multiplier, static_cast<double>(attempts_));
  base = std::min(base, absl::ToDoubleSeconds(options_.max));
  ++attempts_;
  double factor = 1.0 + options_.jitter * (2.0 * env_->RandomFraction() - 1.0);
  return absl::Seconds(base * factor);
}

bool IsRetryable(const absl::Status& s) { return s.code() == absl::StatusCode::kUnavailable; }

absl::Status RetryOnUnavailable(const BackoffOptions& options,
                                const std::function<absl::Status()>& fn, Env* env) {
  Backoff backoff(options, env);
  const absl::Time start = env->Now();
  const absl::Time deadline = options.deadline == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : start + options.deadline;
  int attempts = 0;
  while (true) {
    absl::Status s = fn();
    ++attempts;
    if (!IsRetryable(s)) return s;
    auto give_up = [&](absl::string_view why) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (gave up after ", attempts,
                                                 " attempts over ",
                                                 absl::FormatDuration(env->Now() - start),
                                                 ": ", why, ")"));
    };
    if (options.max_attempts > 0 && attempts >= options.max_attempts) {
      return give_up("attempt limit");
    }
    absl::Duration delay = backoff.NextDelay();
    absl::Time now = env->Now();
    if (now >= deadline) return give_up("deadline");
    env->SleepFor(std::min(delay, deadline - now));
    if (options.should_stop && options.should_stop()) {
      return absl::CancelledError(absl::StrCat("retry stopped: ", s.message()));
    }
  }
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace psrt
