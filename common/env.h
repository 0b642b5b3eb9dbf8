// Env: the seam for the clock, sleeping and randomness, so heartbeat
// timeouts and retry backoff can be driven by a fake clock in unit tests.
// Env::Default() is thread-safe and lives for the whole process.
#ifndef PSRT_COMMON_ENV_H_
#define PSRT_COMMON_ENV_H_

#include <cstdint>

#include "absl/time/time.h"

namespace psrt {

class Env {
 public:
  virtual ~Env() = default;
  virtual absl::Time Now() = 0;
  virtual void SleepFor(absl::Duration d) = 0;
  // Uniform in [0, 1); used for jitter.
  virtual double RandomFraction() = 0;

  static Env* Default();
};

// A fresh random 64-bit incarnation id (never 0), from the OS's entropy.
// Each process draws one at start; a changed id marks a restart.
uint64_t NewIncarnationId();

}  // namespace psrt

#endif  // PSRT_COMMON_ENV_H_
