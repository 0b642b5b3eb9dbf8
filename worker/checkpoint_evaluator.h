// The evaluator task (TensorFlow's `evaluator` job): follows the chief's
// committed checkpoints and evaluates each on the job's test split.
//
// It reads checkpoints from disk, never from the daemons: a committed
// manifest (common/checkpoint) names the snapshot stores, which it opens
// read-only, so training's push/pull path carries no extra request and the
// parameter servers do no work for it. Only committed manifests are read (a
// manifest appears by rename after every store is durable), never a
// checkpoint being written.
//
// Which checkpoints: after each evaluation, the newest committed step not
// yet evaluated; steps committed meanwhile but already superseded are
// skipped (counted and reported), so a slow evaluator never falls further
// behind. A checkpoint that cannot be read or evaluated (a corrupt
// manifest or store, one pruned while being read) is reported and skipped.
//
// Which job: the one given. A checkpoint that records its job
// (CheckpointManifest.job) with another model ends Run() with
// FAILED_PRECONDITION saying so (a wrong --job, not a damaged file);
// AwaitRecordedJob gives the recorded job to an evaluator started without
// one.
//
// When to stop: the chief writes DIR/job_state with running=false only
// after the job's final checkpoint is committed (common/checkpoint's
// ManifestStore). Run() returns once it has seen that state and evaluated
// the newest step committed before it (or failed to), or on Stop().
//
//   CheckpointEvaluatorOptions o;
//   o.job = job;
//   o.checkpoint_dir = "/run/checkpoints";
//   o.on_metrics = [&](int64_t step, const auto& m) { ... };
//   ASSIGN_OR_RETURN(auto evaluator, CheckpointEvaluator::Create(o));
//   RETURN_IF_ERROR(evaluator->Run());  // Stop() from another thread ends it
//
// Run() is called from one thread; Stop() and Status() from any.
#ifndef PSRT_WORKER_CHECKPOINT_EVALUATOR_H_
#define PSRT_WORKER_CHECKPOINT_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/optimizer.h"
#include "common/plan/job_plan.h"
#include "proto/job.pb.h"

namespace psrt {

struct CheckpointEvaluatorOptions {
  TrainingJob job;             // must have a test split
  std::string checkpoint_dir;  // the chief's
  std::string stores_dir;      // where the manifests' stores are; empty: checkpoint_dir
  int threads = 1;             // evaluation kernel threads
  // How often the directory is looked at for a new manifest.
  absl::Duration poll_interval = absl::Milliseconds(200);
  // Each evaluation's metrics ("examples" among them), on Run()'s thread.
  std::function<void(int64_t step, const std::map<std::string, float>& metrics)> on_metrics;
  // One line per event worth telling a person (skips, failures, the end).
  std::function<void(const std::string& line)> report;
};

struct EvaluatorStatus {
  int64_t step = -1;                   // of the last successful evaluation
  std::map<std::string, float> metrics;  // its metrics
  double seconds = 0;                  // how long it took
  int64_t evaluated = 0;               // checkpoints evaluated
  int64_t skipped = 0;                 // committed but superseded before their turn
  int64_t failed = 0;                  // unreadable or failed, reported and skipped
  bool job_finished = false;
};

// The job the newest committed checkpoint in `dir` records, waiting (one
// look every `poll`) until one is committed; CANCELLED once `stopped`
// says so; NOT_FOUND saying to give the job for a checkpoint written
// before manifests recorded it; the manifest's error for a corrupt one.
absl::StatusOr<TrainingJob> AwaitRecordedJob(const std::string& dir, absl::Duration poll,
                                             const std::function<bool()>& stopped);

// The step to evaluate after `last`: the newest of `steps` (ascending) above
// it, or -1 if none; *superseded gets how many others above `last` it passes.
int64_t NextCheckpointStep(const std::vector<int64_t>& steps, int64_t last, int* superseded);

class CheckpointEvaluator {
 public:
  // INVALID_ARGUMENT for a job without a test split or a model that does
  // not plan, naming what is wrong.
  static absl::StatusOr<std::unique_ptr<CheckpointEvaluator>> Create(CheckpointEvaluatorOptions options);

  // Follows the checkpoints until the job is finished and its newest
  // checkpoint evaluated, or Stop(). Errors of one checkpoint are reported,
  // not returned; a checkpoint of another model is returned.
  absl::Status Run();
  void Stop();
  EvaluatorStatus Status() const;

  // The metrics of one committed checkpoint (any layout; hash tables
  // answer ids training never made with their initial rows).
  absl::StatusOr<std::map<std::string, float>> EvaluateStep(int64_t step) const;

 private:
  CheckpointEvaluator(CheckpointEvaluatorOptions options, Evaluator evaluator,
                      std::unique_ptr<Optimizer> optimizer);
  // DIR/job_state exists and says the job is over; a corrupt one is
  // reported (once) and read as still running.
  bool JobFinished();
  // FAILED_PRECONDITION when the checkpoint of `step` records a job whose
  // model is not options_.job's; OK otherwise (a manifest that records no
  // job, or cannot be read, is left to the read that follows).
  absl::Status CheckRecordedModel(int64_t step) const;
  void Report(const std::string& line) const;

  const CheckpointEvaluatorOptions options_;
  const Evaluator evaluator_;
  const std::unique_ptr<Optimizer> optimizer_;  // for hash tables' slot count
  const ManifestStore manifests_;
  bool reported_bad_state_ = false;  // Run()'s thread only

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  EvaluatorStatus status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_WORKER_CHECKPOINT_EVALUATOR_H_
