// StepPrefetcher: reads the next step's batch and pulls its parameters on a
// helper thread while the current step computes.
//
// Only for ASYNC training: the overlapped pull of step t+1 leaves before the
// push of step t, so it misses this worker's own newest update (a staleness
// of one step, as in TensorFlow's and ps-lite's asynchronous training). SYNC
// and bounded staleness wait for that push, so they never overlap.
//
//   StepPrefetcher p([&](int64_t step, StepInputs* in) { ...read, pull... });
//   p.Start(t + 1, tag);            // after step t's own inputs are ready
//   ... compute and push step t ...
//   std::optional<StepInputs> in = p.Take(t + 1, tag);  // waits for it
//
// `tag` names the state the inputs were fetched under (the worker's count of
// pauses and resumes): Take under another tag discards them, so nothing
// pulled before a pause or restore is computed on after it.
#ifndef PSRT_WORKER_STEP_PREFETCHER_H_
#define PSRT_WORKER_STEP_PREFETCHER_H_

#include <functional>
#include <optional>
#include <thread>

#include "absl/status/status.h"
#include "common/input/example.h"
#include "common/compute/step_runner.h"

namespace psrt {

// What a step needs before it can compute.
struct StepInputs {
  absl::Status status;  // the first failure of read or pulls
  Batch batch;
  TensorMap dense;
  TensorMap rows;
};

class StepPrefetcher {
 public:
  using Fetch = std::function<void(int64_t step, StepInputs* inputs)>;
  explicit StepPrefetcher(Fetch fetch) : fetch_(std::move(fetch)) {}
  ~StepPrefetcher() { Drop(); }
  StepPrefetcher(const StepPrefetcher&) = delete;
  StepPrefetcher& operator=(const StepPrefetcher&) = delete;

  // Fetches `step` in the background (drops any earlier one first).
  void Start(int64_t step, int64_t tag);
  // The fetched inputs of `step` under `tag`; nullopt when none were started
  // for them (then the caller fetches itself). Waits for the fetch to end.
  std::optional<StepInputs> Take(int64_t step, int64_t tag);
  // Waits for a fetch in flight and forgets it (before the data source the
  // fetch reads is replaced).
  void Drop();

 private:
  const Fetch fetch_;
  std::thread thread_;
  bool pending_ = false;
  int64_t step_ = -1, tag_ = -1;
  StepInputs inputs_;
};

}  // namespace psrt

#endif  // PSRT_WORKER_STEP_PREFETCHER_H_
