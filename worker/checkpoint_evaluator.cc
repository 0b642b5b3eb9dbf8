#include "worker/checkpoint_evaluator.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "common/plan/job_planner.h"
#include "common/status_macros.h"
#include "common/store/variable.h"
#include "google/protobuf/util/message_differencer.h"

namespace psrt {

int64_t NextCheckpointStep(const std::vector<int64_t>& steps, int64_t last, int* superseded) {
  int newer = 0;
  int64_t next = -1;
  for (int64_t s : steps) {
    if (s <= last) continue;
    ++newer;
    next = std::max(next, s);
  }
  if (superseded != nullptr) *superseded = newer > 0 ? newer - 1 : 0;
  return next;
}

absl::StatusOr<TrainingJob> AwaitRecordedJob(const std::string& dir, absl::Duration poll,
                                             const std::function<bool()>& stopped) {
  while (true) {
    int64_t found_step = -1;
    absl::StatusOr<TrainingJob> job = RecordedJob(dir, -1, &found_step);
    // NOT_FOUND before any manifest is read: nothing committed yet. Once
    // one was read (found_step set), its verdict is final.
    if (job.ok() || found_step >= 0 || !absl::IsNotFound(job.status())) return job;
    if (stopped()) return absl::CancelledError(absl::StrCat("stopped before a checkpoint was committed in ", dir));
    absl::SleepFor(poll);
  }
}

absl::StatusOr<std::unique_ptr<CheckpointEvaluator>> CheckpointEvaluator::Create(
    CheckpointEvaluatorOptions options) {
  if (options.job.input().test().files_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", options.job.name(), ": input.test names no files; nothing to evaluate on"));
  }
  if (options.checkpoint_dir.empty()) return absl::InvalidArgumentError("no checkpoint directory");
  // The evaluation graph does not depend on placement: plan for one store.
  ASSIGN_OR_RETURN(JobPlan plan, PlanJob(options.job, 1));
  Evaluator evaluator = MakeEvaluator(options.job, plan, options.threads);
  // Only the slot count matters (LoadState checks it); the schedule the
  // chief completes from the run's length does not change it.
  OptimizerDef optimizer_def = options.job.optimizer();
  optimizer_def.clear_schedule();
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, Optimizer::Create(optimizer_def));
  return std::unique_ptr<CheckpointEvaluator>(
      new CheckpointEvaluator(std::move(options), std::move(evaluator), std::move(optimizer)));
}

CheckpointEvaluator::CheckpointEvaluator(CheckpointEvaluatorOptions options, Evaluator evaluator,
                                         std::unique_ptr<Optimizer> optimizer)
    : options_(std::move(options)),
      evaluator_(std::move(evaluator)),
      optimizer_(std::move(optimizer)),
      manifests_(options_.checkpoint_dir) {}

void CheckpointEvaluator::Report(const std::string& line) const {
  if (options_.report) options_.report(line);
}

absl::StatusOr<std::map<std::string, float>> CheckpointEvaluator::EvaluateStep(int64_t step) const {
  ASSIGN_OR_RETURN(CheckpointVariables ckpt,
                   ReadCheckpointVariables(options_.checkpoint_dir, step, options_.job, options_.stores_dir));
  // A hash table answers as its PS would with PullRowsRequest.read_only:
  // the checkpoint's row for an id training made, the initial row (same
  // initializer, same seed) for one it never saw, and makes none.
  std::map<std::string, std::unique_ptr<Variable>> tables;
  for (const auto& [name, state] : ckpt.hash_tables) {
    ASSIGN_OR_RETURN(std::unique_ptr<Variable> table, Variable::Create(state.def, optimizer_.get()));
    RETURN_IF_ERROR(table->LoadState(state));
    tables[name] = std::move(table);
  }
  RowReader rows;
  if (!tables.empty()) {
    rows = [&tables](const std::string& table, const Tensor& ids) -> absl::StatusOr<Tensor> {
      auto it = tables.find(table);
      if (it == tables.end()) return absl::NotFoundError(absl::StrCat("no hash table ", table, " in the checkpoint"));
      return it->second->ReadRows(ids, /*pool=*/nullptr, /*make_rows=*/false);
    };
  }
  return evaluator_(ckpt.values, rows);
}

absl::Status CheckpointEvaluator::CheckRecordedModel(int64_t step) const {
  absl::StatusOr<TrainingJob> recorded = RecordedJob(options_.checkpoint_dir, step);
  if (!recorded.ok()) return absl::OkStatus();
  if (google::protobuf::util::MessageDifferencer::Equals(recorded->model(), options_.job.model())) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("job \"", options_.job.name(), "\" does not match the checkpoint of step ", step, " in ",
                   options_.checkpoint_dir, ": its model is not the one job \"", recorded->name(),
                   "\" trained, which the checkpoint records (leave --job out to evaluate that one)"));
}

bool CheckpointEvaluator::JobFinished() {
  // A missing file reads as the empty state (not running): the chief has
  // not started yet, which is not the end.
  struct stat st;
  if (::stat(absl::StrCat(options_.checkpoint_dir, "/job_state").c_str(), &st) != 0) return false;
  absl::StatusOr<ChiefJobState> state = manifests_.ReadJobState();
  if (!state.ok()) {
    if (!reported_bad_state_) Report(absl::StrCat("ignoring the job state: ", state.status().message()));
    reported_bad_state_ = true;
    return false;
  }
  return !state->running();
}

absl::Status CheckpointEvaluator::Run() {
  int64_t last = -1;  // the newest step tried, evaluated or failed
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return absl::OkStatus();
    }
    // The state first: once it says finished, the final manifest was
    // already committed, so the listing below includes it.
    const bool finished = JobFinished();
    int superseded = 0;
    const int64_t next = NextCheckpointStep(manifests_.Steps(), last, &superseded);
    if (next >= 0) {
      if (superseded > 0) {
        Report(absl::StrCat("behind: skipping ", superseded, " older checkpoint(s) for the newest, step ", next));
      }
      // Another model's checkpoint is no damaged file to skip: every later
      // one is the other job's too.
      RETURN_IF_ERROR(CheckRecordedModel(next));
      const absl::Time start = absl::Now();
      absl::StatusOr<std::map<std::string, float>> metrics = EvaluateStep(next);
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      last = next;
      {
        absl::MutexLock lock(&mu_);
        status_.skipped += superseded;
        if (metrics.ok()) {
          status_.step = next;
          status_.metrics = *metrics;
          status_.seconds = seconds;
          ++status_.evaluated;
        } else {
          ++status_.failed;
        }
      }
      if (!metrics.ok()) {
        Report(absl::StrCat("checkpoint of step ", next, " skipped: ", metrics.status().message()));
        continue;
      }
      std::vector<std::string> parts;
      for (const auto& [k, v] : *metrics) parts.push_back(absl::StrCat(k, " ", v));
      Report(absl::StrCat("evaluated step ", next, " in ", seconds, " s: ", absl::StrJoin(parts, ", ")));
      if (options_.on_metrics) options_.on_metrics(next, *metrics);
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (finished) {
      status_.job_finished = true;
      Report(absl::StrCat("the job is finished; last checkpoint evaluated: step ", status_.step));
      return absl::OkStatus();
    }
    // A deadline-bounded wait that Stop() cuts short.
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopped), options_.poll_interval);
  }
}

void CheckpointEvaluator::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
}

EvaluatorStatus CheckpointEvaluator::Status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace psrt
