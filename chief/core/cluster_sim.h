// A whole cluster in one thread, driven by a seed: simulated parameter
// servers and workers, a simulated clock, and the chief's real decisions
// (WatchCore) with a shell that acts on the simulated tasks as the
// coordinator acts on real ones (pause, snapshot and commit, restore,
// restart, deal the membership again). A fault schedule drawn from the
// seed kills, stops and restarts tasks and the chief; every history is
// checked against invariants, and a failing seed replays exactly.
//
// What the simulated cluster models, and what it does not:
// - Each worker trains steps 0..end-1 of its own data; a PS applies a
//   worker's step s only as that worker's next (s == applied), so a step
//   applied twice or skipped is seen. SYNC: no worker pushes step s before
//   every member pushed s-1 there.
// - A PS killed loses its state and comes back under a new incarnation; a
//   stopped one keeps it. Workers calling a PS that does not answer, or
//   one at another generation, park (PAUSED) as real workers do.
// - A worker killed comes back IDLE under a new incarnation. ASYNC, it may
//   push a few steps after the chief last heard from it (the record lags),
//   and die in the middle of a step's pushes (applied on some PS, not the
//   others: partial_steps). Each PS keeps, per data stream, the next batch
//   it applied since the last restore (PsStatusResponse.stream_next_batch),
//   and answers a push of a batch below it "duplicate" without applying it.
//   The chief reads it: a worker back under a new incarnation starts at its
//   first step whose batch some PS has not applied (kRestartWorker, then
//   WatchCore::DecideRestart); a membership change hands a holder's streams
//   on from there when it did not answer the pause; a checkpoint waits
//   until the PS agree. A step only some PS applied is pushed again and
//   taken only where it is missing (duplicate_pushes). A batch applied
//   twice on a PS, or pushed again when every PS had applied it, is a
//   violation.
// - A step's push to a PS comes in two buckets, and a worker may die
//   between them (bucket_cuts). The PS remembers the batch in progress
//   (PsStatusResponse.stream_part_batch) and skips the bucket it took when
//   the batch is pushed again (skipped_buckets); a checkpoint waits while
//   any PS holds part of a batch. A bucket applied twice is a violation,
//   and so is a checkpoint copying a batch in part. Which variables a
//   bucket holds is not modelled (the PS records them by name).
// - Not modelled yet: replication and failover, collective groups, PS
//   joining and leaving, data streams beyond "a removed worker's data goes
//   to the others", disks and files.
#ifndef PSRT_CHIEF_CORE_CLUSTER_SIM_H_
#define PSRT_CHIEF_CORE_CLUSTER_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "chief/core/watch_core.h"

namespace psrt {

struct SimOptions {
  uint64_t seed = 1;
  int num_ps = 2;
  int num_workers = 2;
  int64_t end_step = 200;
  bool sync = false;
  int64_t checkpoint_every_steps = 25;
  // Faults are drawn during the first fault_window (virtual time); then the
  // job must finish within finish_within.
  absl::Duration fault_window = absl::Seconds(60);
  absl::Duration finish_within = absl::Minutes(10);
  double fault_rate_per_s = 0.5;  // a fault starts this often on average
  bool chief_restarts = true;
};

struct SimResult {
  bool done = false;
  std::vector<std::string> violations;  // empty: every invariant held
  std::vector<std::string> history;     // the last events, for a failing seed
  absl::Duration virtual_time;
  int faults = 0;
  int recoveries = 0;
  int membership_changes = 0;
  int chief_restarts = 0;
  int64_t checkpoints = 0;
  int64_t partial_steps = 0;      // ASYNC workers killed between two PS's pushes of a step
  int64_t bucket_cuts = 0;        // of those, killed between two buckets of a push to one PS
  int64_t skipped_buckets = 0;    // buckets a PS had applied of a batch, pushed again and skipped
  int64_t duplicate_pushes = 0;   // pushes a PS answered "duplicate" (see the header comment)
  int64_t rolled_back_steps = 0;  // as the chief counted them
};

// A job's shape drawn from the seed: 1-3 PS, 1-4 workers, SYNC or ASYNC,
// its length and checkpoint interval.
SimOptions SimOptionsForSeed(uint64_t seed);

SimResult RunSimulation(const SimOptions& options);

}  // namespace psrt

#endif  // PSRT_CHIEF_CORE_CLUSTER_SIM_H_
