// CheckpointCycle: the chief's two-phase checkpoint. Workers pause (only
// in-flight pushes finish), every store copies its state in memory,
// workers resume, the stores write their copies in the background, and
// only when every store reports its copy durable does the chief commit a
// manifest (checkpoint_manifest.h). A failed checkpoint is abandoned (no
// manifest) and tried again with backoff, loudly.
#ifndef PSRT_CHIEF_CHECKPOINT_CYCLE_H_
#define PSRT_CHIEF_CHECKPOINT_CYCLE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "chief/chief_cluster.h"

namespace psrt {

class CheckpointCycle {
 public:
  explicit CheckpointCycle(ChiefCluster* cluster) : cluster_(*cluster) {}

  // One checkpoint of the slowest worker's step, committed when every
  // store made it durable.
  absl::Status Checkpoint();
  // Checkpoint(), and on failure the backoff and the loud warnings.
  void TryCheckpoint();
  // The final checkpoint failed once more: how long to wait before the next.
  absl::Duration BackoffAfterFinalFailure() { return cluster_.Backoff(failures_++); }

  int failures_in_a_row() const { return failures_; }
  // Not before this time again after a failure (the watch core reads it).
  absl::Time next_try() const { return next_try_; }

 private:
  // Every active store reports `step` durable (or an error, or a restart).
  absl::Status WaitDurable(int64_t step);

  ChiefCluster& cluster_;
  int failures_ = 0;  // in a row
  absl::Time next_try_ = absl::InfinitePast();
};

}  // namespace psrt

#endif  // PSRT_CHIEF_CHECKPOINT_CYCLE_H_
