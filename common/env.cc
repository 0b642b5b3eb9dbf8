#include "common/env.h"

#include <random>

#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"

namespace psrt {
namespace {

class RealEnv : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  double RandomFraction() override {
    absl::MutexLock lock(&mu_);
    return absl::Uniform(bitgen_, 0.0, 1.0);
  }

 private:
  absl::Mutex mu_;
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

Env* Env::Default() {
  static Env* env = new RealEnv();
  return env;
}

uint64_t NewIncarnationId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

}  // namespace psrt
