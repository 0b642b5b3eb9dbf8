#include "chief/coordinator.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "common/input/source.h"

namespace psrt {
namespace {

std::string CheckpointDir(const CoordinatorOptions& o) {
  if (!o.checkpoint_dir.empty()) return o.checkpoint_dir;
  if (!o.job.checkpoint().dir().empty()) return o.job.checkpoint().dir();
  return "/tmp/psrt-checkpoints";
}

std::string FormatEta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int s = static_cast<int>(seconds);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, TaskRegistry* registry,
                         ChannelCache* channels, Planner planner, Evaluator evaluator)
    : options_(std::move(options)),
      registry_(registry),
      channels_(channels),
      planner_(std::move(planner)),
      evaluator_(std::move(evaluator)),
      report_(options_.report ? options_.report
                              : [](const std::string& line) { LOG(INFO) << line; }),
      manifests_(CheckpointDir(options_)) {
  for (int i = 0; i < options_.cluster.NumTasks(kPsJob); ++i) {
    TaskId t = MakeTaskId(kPsJob, i);
    PsView v;
    v.admin = std::make_unique<PsAdmin>(channels_->Get(*options_.cluster.AddressOf(t)), TaskName(t));
    ps_.push_back(std::move(v));
  }
  for (int i = 0; i < options_.cluster.NumTasks(kWorkerJob); ++i) {
    TaskId t = MakeTaskId(kWorkerJob, i);
    WorkerView v;
    v.control = std::make_unique<WorkerControl>(channels_->Get(*options_.cluster.AddressOf(t)),
                                                TaskName(t));
    workers_.push_back(std::move(v));
  }
  absl::MutexLock lock(&mu_);
  status_.set_state(JobStatusResponse::WAITING_FOR_TASKS);
}

JobStatusResponse Coordinator::Status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void Coordinator::OnFailureReport(const ReportFailureRequest& report) {
  absl::MutexLock lock(&mu_);
  failure_reports_.push_back(report);
}

int64_t Coordinator::MinStep() const {
  int64_t m = end_step_;
  for (const WorkerView& w : workers_) {
    if (!w.removed) m = std::min(m, w.step);
  }
  return m;
}

int Coordinator::ActiveWorkers() const {
  int n = 0;
  for (const WorkerView& w : workers_) n += w.removed ? 0 : 1;
  return std::max(n, 1);
}

absl::Status Coordinator::ResizeSyncGroup() {
  for (int p = 0; p < NumPs(); ++p) RETURN_IF_ERROR(CreateVariablesOn(p));
  return absl::OkStatus();
}

WorkerAssignment Coordinator::AssignmentFor(int i, int64_t step) const {
  WorkerAssignment a;
  *a.mutable_graph() = plan_.graph;
  *a.mutable_placement() = plan_.placement;
  *a.mutable_input() = options_.job.input();
  *a.mutable_consistency() = options_.job.consistency();
  a.set_shard_index(i);
  a.set_num_shards(NumWorkers());
  a.set_start_step(step);
  a.set_end_step(end_step_);
  a.set_loss_node(plan_.loss_node);
  for (const auto& [var, node] : plan_.gradient_node) (*a.mutable_gradient_node())[var] = node;
  for (const auto& m : plan_.metric_nodes) a.add_metric_node(m);
  a.set_seed(options_.job.seed());
  a.set_chief_incarnation(options_.incarnation);
  a.set_generation(generation_);
  for (const TaskState& t : registry_->All()) {
    if (t.info.task().job() == kPsJob) *a.add_ps() = t.info;
  }
  return a;
}

absl::Status Coordinator::CreateVariablesOn(int ps) {
  CreateVariablesRequest req;
  for (const VariablePlacement& vp : plan_.placement.variable()) {
    for (const VariablePlacement::Shard& shard : vp.shard()) {
      if (shard.ps_task() != ps) continue;
      VariableDef* v = req.add_variable();
      *v = vp.variable();
      if (vp.shard_size() > 1) {
        v->set_row_begin(shard.row_begin());
        v->set_row_end(shard.row_end());
      }
    }
  }
  *req.mutable_optimizer() = options_.job.optimizer();
  *req.mutable_consistency() = options_.job.consistency();
  req.set_num_workers(ActiveWorkers());
  req.set_chief_incarnation(options_.incarnation);
  ASSIGN_OR_RETURN(CreateVariablesResponse resp, ps_[ps].admin->CreateVariables(req));
  ps_[ps].incarnation = resp.incarnation();
  return absl::OkStatus();
}

absl::Status Coordinator::StartWorker(int i, int64_t step) {
  RETURN_IF_ERROR(workers_[i].control->Start(AssignmentFor(i, step)));
  workers_[i].step = step;
  workers_[i].state = WorkerStatusResponse::RUNNING;
  workers_[i].incarnation = registry_->Get(MakeTaskId(kWorkerJob, i)).info.incarnation();
  return absl::OkStatus();
}

absl::Status Coordinator::Setup() {
  const TrainingJob& job = options_.job;
  absl::Duration register_deadline =
      absl::Milliseconds(job.failure().register_deadline_ms() > 0 ? job.failure().register_deadline_ms()
                                                                  : 120000);
  Report(true);
  RETURN_IF_ERROR(registry_->WaitForAll(register_deadline));
  ASSIGN_OR_RETURN(plan_, planner_(job, NumPs()));

  if (job.steps() > 0) {
    end_step_ = job.steps();
  } else {
    if (job.epochs() <= 0) return absl::InvalidArgumentError("job: set steps or epochs");
    ASSIGN_OR_RETURN(int64_t examples, CountExamples(job.input(), job.input().train()));
    int64_t shard = (examples + NumWorkers() - 1) / NumWorkers();
    int64_t batch = std::max(1, job.input().batch_size());
    end_step_ = job.epochs() * ((shard + batch - 1) / batch);
  }
  summary_.total_steps = end_step_;

  generation_ = absl::ToUnixMillis(absl::Now());
  std::optional<CheckpointManifest> restore;
  if (options_.restore == "auto") {
    absl::StatusOr<CheckpointManifest> m = RestoreNewest();
    if (m.ok()) {
      restore = *m;
    } else if (m.status().code() != absl::StatusCode::kNotFound) {
      return m.status();
    }
  } else if (options_.restore != "never") {
    int64_t step;
    if (!absl::SimpleAtoi(options_.restore, &step)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--restore must be auto, never or a step, not \"", options_.restore, "\""));
    }
    ASSIGN_OR_RETURN(restore, manifests_.Read(step));
    for (int p = 0; p < NumPs(); ++p) RETURN_IF_ERROR(CreateVariablesOn(p));
    for (int p = 0; p < NumPs(); ++p) {
      RETURN_IF_ERROR(ps_[p].admin->Restore(restore->step(), manifests_.dir()).status());
    }
  }
  if (restore.has_value()) {
    for (int i = 0; i < NumWorkers(); ++i) {
      workers_[i].step = i < restore->worker_step_size() ? restore->worker_step(i) : restore->step();
    }
    last_checkpoint_step_ = restore->step();
    summary_.restored_from_step = restore->step();
    summary_.failures_survived = restore->failures_survived();
    summary_.checkpoints.push_back(restore->step());
    report_(absl::StrCat("restored checkpoint of step ", restore->step(), " from ",
                         manifests_.PathFor(restore->step())));
  } else {
    for (int p = 0; p < NumPs(); ++p) RETURN_IF_ERROR(CreateVariablesOn(p));
    for (WorkerView& w : workers_) w.step = 0;
    RETURN_IF_ERROR(Checkpoint());  // the base every recovery can go back to
  }
  last_checkpoint_time_ = absl::Now();
  last_eval_step_ = MinStep();
  for (int i = 0; i < NumWorkers(); ++i) RETURN_IF_ERROR(StartWorker(i, workers_[i].step));
  absl::MutexLock lock(&mu_);
  status_.set_state(JobStatusResponse::RUNNING);
  return absl::OkStatus();
}

absl::StatusOr<JobSummary> Coordinator::Run() {
  start_time_ = absl::Now();
  summary_.job_name = options_.job.name();
  summary_.checkpoint_dir = manifests_.dir();
  absl::Status s = Setup();
  int64_t first_steps = 0;  // restored workers resume mid-run: count only this run's steps
  for (const WorkerView& w : workers_) first_steps += w.step;
  bool done = false;
  while (s.ok() && !done) {
    registry_->WaitForChange(registry_->version(), options_.poll_interval);
    s = Watch(&done);
  }
  if (s.ok()) {
    Report(true);
    if (last_checkpoint_step_ != MinStep()) s = Checkpoint();
  }
  if (s.ok() && evaluator_) s = Evaluate(MinStep());
  summary_.steps = MinStep();
  summary_.final_loss = Status().loss();
  summary_.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start_time_);
  int64_t trained_steps = -first_steps;
  for (const WorkerView& w : workers_) trained_steps += w.step;
  summary_.examples_per_sec = summary_.wall_seconds > 0
                                  ? static_cast<double>(trained_steps) *
                                        std::max(1, options_.job.input().batch_size()) /
                                        summary_.wall_seconds
                                  : 0;
  {
    absl::MutexLock lock(&mu_);
    status_.set_state(s.ok() ? JobStatusResponse::DONE : JobStatusResponse::FAILED);
    if (!s.ok()) status_.set_error(std::string(s.message()));
  }
  for (WorkerView& w : workers_) (void)w.control->Shutdown();
  if (!s.ok()) return s;
  return summary_;
}

absl::Status Coordinator::Watch(bool* done) {
  // Parameter servers: a new incarnation or a failure report means lost state.
  std::string ps_problem;
  for (int p = 0; p < NumPs(); ++p) {
    absl::StatusOr<PsStatusResponse> st = ps_[p].admin->Status(absl::Seconds(2));
    if (!st.ok()) {
      ps_problem = absl::StrCat(ps_[p].admin->name(), " unreachable: ", st.status().message());
    } else if (st->incarnation() != ps_[p].incarnation) {
      ps_problem = absl::StrCat(ps_[p].admin->name(), " restarted");
    }
    if (!ps_problem.empty()) break;
  }
  std::vector<ReportFailureRequest> reports;
  {
    absl::MutexLock lock(&mu_);
    reports.swap(failure_reports_);
  }
  if (!ps_problem.empty()) return Recover(ps_problem);
  // Reports about a PS that is fine again are stale; workers parked by
  // them are resumed below.

  // Workers.
  const absl::Duration heartbeat_timeout = absl::Milliseconds(
      options_.job.failure().heartbeat_timeout_ms() > 0 ? options_.job.failure().heartbeat_timeout_ms() : 10000);
  const absl::Duration sync_wait = absl::Milliseconds(
      options_.job.failure().sync_wait_for_worker_ms() > 0 ? options_.job.failure().sync_wait_for_worker_ms() : 30000);
  bool all_done = true;
  double eps = 0;
  for (int i = 0; i < NumWorkers(); ++i) {
    WorkerView& w = workers_[i];
    absl::StatusOr<WorkerStatusResponse> st = w.control->Status(absl::Seconds(2));
    if (!st.ok()) {
      if (w.down_since == absl::InfiniteFuture()) {
        report_(absl::StrCat(w.control->name(), " is down: ", st.status().message()));
        w.down_since = absl::Now();
      }
      w.reachable = false;
      if (!w.removed && absl::Now() - w.down_since > (Sync() ? sync_wait : heartbeat_timeout)) {
        w.removed = true;
        if (Sync()) {
          report_(absl::StrCat(w.control->name(), " did not come back within ",
                               absl::FormatDuration(sync_wait), "; the SYNC group shrinks to ",
                               ActiveWorkers(), " workers"));
          RETURN_IF_ERROR(ResizeSyncGroup());
        } else {
          report_(absl::StrCat(w.control->name(), " is gone; ASYNC training goes on without it"));
        }
      }
      if (!w.removed) all_done = false;
      continue;
    }
    w.reachable = true;
    w.down_since = absl::InfiniteFuture();
    if (st->incarnation() != w.incarnation || st->state() == WorkerStatusResponse::IDLE) {
      int64_t step = w.step;
      if (w.removed) {
        w.removed = false;
        if (Sync()) {
          step = MinStep();  // rejoin at the group's step
          RETURN_IF_ERROR(ResizeSyncGroup());
        }
      }
      if (Sync()) step = std::min(step, MinStep());
      report_(absl::StrCat(w.control->name(), " (re)started; starting it at step ", step));
      RETURN_IF_ERROR(StartWorker(i, step));
      all_done = false;
      continue;
    }
    w.state = st->state();
    w.step = st->step();
    w.loss = st->loss();
    w.examples_per_sec = st->examples_per_sec();
    eps += w.examples_per_sec;
    if (w.state == WorkerStatusResponse::FAILED) {
      return absl::AbortedError(absl::StrCat(w.control->name(), " failed: ", st->error()));
    }
    if (w.state == WorkerStatusResponse::PAUSED && !reports.empty()) {
      // Parked after a PS error, but every PS answers with its incarnation:
      // the error was passing. Let it go on.
      RETURN_IF_ERROR(w.control->Resume(w.step, generation_));
    }
    if (w.state != WorkerStatusResponse::DONE) all_done = false;
  }
  {
    absl::MutexLock lock(&mu_);
    status_.set_step(MinStep());
    status_.set_examples_per_sec(eps);
    float loss = 0;
    for (const WorkerView& w : workers_) loss += w.removed ? 0 : w.loss / ActiveWorkers();
    status_.set_loss(loss);
    status_.set_last_checkpoint_step(last_checkpoint_step_);
    status_.set_failures_survived(summary_.failures_survived);
  }
  summary_.examples_per_sec_last_window = eps;
  Report(false);
  if (all_done) {
    *done = true;
    return absl::OkStatus();
  }

  const CheckpointPolicy& policy = options_.job.checkpoint();
  int64_t step = MinStep();
  bool by_steps = policy.every_steps() > 0 && step >= last_checkpoint_step_ + policy.every_steps();
  bool by_time = policy.every_seconds() > 0 &&
                 absl::Now() - last_checkpoint_time_ >= absl::Seconds(policy.every_seconds());
  if ((by_steps || by_time) && step > last_checkpoint_step_) RETURN_IF_ERROR(Checkpoint());
  const EvalDef& eval = options_.job.eval();
  if (evaluator_ && eval.every_steps() > 0 && step >= last_eval_step_ + eval.every_steps()) {
    RETURN_IF_ERROR(Evaluate(step));
  }
  return absl::OkStatus();
}

void Coordinator::Report(bool force) {
  absl::Time now = absl::Now();
  if (!force && now - last_report_ < options_.report_interval) return;
  last_report_ = now;
  JobStatusResponse s = Status();
  if (s.state() == JobStatusResponse::WAITING_FOR_TASKS) {
    report_("waiting for every task to register");
    return;
  }
  int64_t step = MinStep();
  double frac = end_step_ > 0 ? static_cast<double>(step) / end_step_ : 0;
  double per_step_s = 0;
  int64_t done_steps = step - std::max<int64_t>(0, summary_.restored_from_step);
  if (done_steps > 0) per_step_s = absl::ToDoubleSeconds(now - start_time_) / done_steps;
  int epoch = 0;
  for (const TaskState& t : registry_->All()) epoch = std::max(epoch, t.epoch);
  if (options_.scalar) {
    options_.scalar("loss", step, s.loss());
    options_.scalar("examples_per_sec", step, static_cast<float>(s.examples_per_sec()));
  }
  report_(absl::StrFormat(
      "step %d/%d (%.1f%%) epoch %d loss %.4f examples/s %.0f eta %s checkpoint %d", step,
      end_step_, 100 * frac, epoch + 1, s.loss(), s.examples_per_sec(),
      FormatEta(per_step_s * (end_step_ - step)), last_checkpoint_step_));
}

}  // namespace psrt
