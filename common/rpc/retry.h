// Retry with exponential backoff and jitter, for calls to peers that may be
// restarting. Only UNAVAILABLE is retried: every other code means the peer
// answered, and retrying would not change its mind.
//
//   BackoffOptions opts;
//   opts.deadline = absl::Seconds(30);
//   absl::Status s = RetryOnUnavailable(opts, [&] { return client.Register(req); });
#ifndef PSRT_COMMON_RPC_RETRY_H_
#define PSRT_COMMON_RPC_RETRY_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "grpcpp/client_context.h"

namespace psrt {

struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(50);
  absl::Duration max = absl::Seconds(2);
  double multiplier = 2.0;
  double jitter = 0.2;  // each delay is scaled by a factor in [1-jitter, 1+jitter]
  // Total time across attempts; InfiniteDuration() retries until stopped.
  absl::Duration deadline = absl::Seconds(30);
  int max_attempts = 0;  // 0 = no limit but the deadline
  // Polled between attempts; true ends the retry with CANCELLED.
  std::function<bool()> should_stop;
};

// The delays of one retry loop. Not thread-safe.
class Backoff {
 public:
  explicit Backoff(const BackoffOptions& options, Env* env = Env::Default())
      : options_(options), env_(env) {}
  // The delay before the next attempt, growing geometrically to `max`.
  absl::Duration NextDelay();
  int attempts() const { return attempts_; }
  void Reset() { attempts_ = 0; }

 private:
  const BackoffOptions options_;
  Env* const env_;  // not owned
  int attempts_ = 0;
};

bool IsRetryable(const absl::Status& s);

// Calls `fn` until it returns something other than UNAVAILABLE, the
// attempts or deadline run out, or should_stop says so. The final error
// says how many attempts were made over how long.
absl::Status RetryOnUnavailable(const BackoffOptions& options,
                                const std::function<absl::Status()>& fn,
                                Env* env = Env::Default());

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout);

}  // namespace psrt

#endif  // PSRT_COMMON_RPC_RETRY_H_
