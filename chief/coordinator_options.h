// What a coordinator is given (CoordinatorOptions) and what it answers
// (JobSummary), and the chief's clock: below the coordinator's parts
// (chief_cluster.h), which all read them.
#ifndef PSRT_CHIEF_COORDINATOR_OPTIONS_H_
#define PSRT_CHIEF_COORDINATOR_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "proto/job.pb.h"

namespace psrt {

// The chief's clock for deadlines and durations: monotonic, so that a step
// of the wall clock (NTP, an operator) neither gives up on every silent
// task at once nor makes one wait for ever. WatchCore is handed this time.
inline absl::Time ChiefNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

struct CoordinatorOptions {
  TrainingJob job;
  ClusterSpec cluster;
  std::string checkpoint_dir;    // overrides job.checkpoint.dir when set
  std::string restore = "auto";  // auto | never | a step
  uint64_t incarnation = 0;
  // Gets each progress line (default: LOG(INFO)).
  std::function<void(const std::string&)> report;
  // Gets each scalar for TensorBoard (loss, examples/s, eval metrics).
  std::function<void(const std::string& tag, int64_t step, float value)> scalar;
  absl::Duration poll_interval = absl::Milliseconds(100);
  // Fault injection for tests: SIGKILL the chief just before it commits its
  // Nth checkpoint (after every PS made that snapshot durable). 0 = never.
  int fault_kill_before_commit = 0;
  absl::Duration report_interval = absl::Seconds(2);
};

struct JobSummary {
  std::string job_name;
  int64_t steps = 0;  // per worker
  int64_t total_steps = 0;
  int64_t restored_from_step = -1;
  double wall_seconds = 0;
  double examples_per_sec = 0;              // the run's mean: examples trained / wall_seconds
  double examples_per_sec_last_window = 0;  // the workers' last heartbeat figures, summed
  float final_loss = 0;
  std::map<std::string, float> metrics;  // final evaluation
  // The job has a test split but its final evaluation failed (metrics is
  // then empty): why. The chief exits 3 (training done, no final metric).
  std::string final_evaluation_error;
  std::vector<int64_t> checkpoints;
  int failures_survived = 0;
  // Replicated shards: PS failures survived by promoting backups, and the
  // worker steps a recovery took back (0 for a failover: none is redone).
  int failovers = 0;
  int64_t rolled_back_steps = 0;
  // Backups rebuilt on a PS that answered again after a failover.
  int rebuilds = 0;
  std::string checkpoint_dir;
  // Early stopping ended the run at this step (-1: it ran to total_steps).
  int64_t stopped_early_at_step = -1;

  std::string ToJson() const;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_COORDINATOR_OPTIONS_H_
