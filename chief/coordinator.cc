#include "chief/coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/graph/model_compiler.h"
#include "common/input/source.h"
#include "common/json_string.h"
#include "common/optimizer.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"
#include "common/transport/ps_client.h"
#include "glog/logging.h"

namespace psrt {
namespace {

std::string FormatEta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int s = static_cast<int>(seconds);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

WatchRules WatchRulesFor(const TrainingJob& job, const JobShape& shape, bool has_evaluator) {
  const FailurePolicy& f = job.failure();
  WatchRules r;
  r.collective = shape.collective;
  r.sync = shape.sync;
  r.replicated = shape.replicated;
  r.num_ps_tasks = shape.num_ps_tasks;
  r.failover_after = shape.failover_after;
  r.heartbeat_timeout = absl::Milliseconds(f.heartbeat_timeout_ms() > 0 ? f.heartbeat_timeout_ms() : 10000);
  r.sync_wait = absl::Milliseconds(f.sync_wait_for_worker_ms() > 0 ? f.sync_wait_for_worker_ms() : 30000);
  r.min_workers = f.min_workers();
  r.ps_wait = f.ps_wait_ms() > 0 ? absl::Milliseconds(f.ps_wait_ms()) : absl::InfiniteDuration();
  r.checkpoint_every_steps = job.checkpoint().every_steps();
  r.checkpoint_every = absl::Seconds(std::max<int64_t>(0, job.checkpoint().every_seconds()));
  r.eval_every_steps = has_evaluator ? job.eval().every_steps() : 0;
  return r;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, TaskRegistry* registry, ChannelCache* channels, Planner planner,
                         Evaluator evaluator)
    : cluster_(std::move(options), registry, channels),
      planner_(std::move(planner)),
      evaluator_(std::move(evaluator)),
      core_(WatchRulesFor(cluster_.options.job, cluster_.shape, static_cast<bool>(evaluator_))),
      checkpoints_(&cluster_),
      group_(&cluster_, &core_),
      recovery_(&cluster_, &group_),
      failover_(&cluster_, &recovery_),
      worker_membership_(&cluster_),
      ps_membership_(&cluster_) {
  if (evaluator_ && !cluster_.options.job.eval().early_stopping().monitor().empty()) {
    early_stopping_.emplace(cluster_.options.job.eval().early_stopping());
  }
  const FailurePolicy& f = cluster_.options.job.failure();
  // Workers beyond the spec may join up to failure.max_workers.
  if (cluster_.shape.elastic) registry->AdmitWorkersUpTo(f.max_workers());
  // PS beyond the spec may join up to failure.max_ps, and PS may leave.
  if (cluster_.shape.elastic_ps) registry->AdmitPsUpTo(std::max(f.max_ps(), cluster_.shape.num_ps_tasks));
  if (f.max_ps() > 0 && !cluster_.shape.elastic_ps) {
    cluster_.report("job.failure.max_ps is ignored: " + cluster_.shape.elastic_ps_refusal +
                    "; no PS joins or leaves this job");
  }
  cluster_.EditStatus([](JobStatusResponse* status) {
    status->set_state(JobStatusResponse::WAITING_FOR_TASKS);
    status->set_eval_step(-1);
    status->set_loss_step(-1);
  });
}

absl::Status Coordinator::Setup() {
  const TrainingJob& job = cluster_.options.job;
  RETURN_IF_ERROR(CheckStrategy(job, cluster_.options.cluster.NumTasks(kPsJob), cluster_.NumWorkers()));
  // A warm start is read and checked now, before any task is waited for:
  // a source that does not fit the job stops it before it starts.
  ASSIGN_OR_RETURN(std::optional<WarmStartValues> warm, ReadWarmStartIfFirst());
  if (cluster_.shape.replicated) cluster_.InitReplicas();
  Report(true);
  RETURN_IF_ERROR(WaitForRegistration());
  cluster_.EditStatus([&](JobStatusResponse* status) { status->clear_waiting_for(); });
  ASSIGN_OR_RETURN(cluster_.plan, planner_(job, cluster_.shape.num_ps_tasks));
  // Every store creates the warm-started variables from the source's values
  // (at the first start, and at any fresh start of this chief after it).
  if (warm.has_value()) ApplyWarmStart(*warm, &cluster_.plan.placement);
  RETURN_IF_ERROR(group_.ShareReplicaVariables());

  if (job.steps() > 0) {
    cluster_.end_step = job.steps();
  } else {
    if (job.epochs() <= 0) return absl::InvalidArgumentError("job: set steps or epochs");
    ASSIGN_OR_RETURN(int64_t examples, CountExamples(job.input(), job.input().train()));
    int64_t shard = (examples + cluster_.NumWorkers() - 1) / cluster_.NumWorkers();
    int64_t batch = std::max(1, job.input().batch_size());
    cluster_.end_step = job.epochs() * ((shard + batch - 1) / batch);
  }
  cluster_.job_steps = cluster_.end_step;
  cluster_.summary.total_steps = cluster_.end_step;

  // Failures survived so far, kept beside the manifests; a chief that finds
  // the job still marked running took over from one that died.
  absl::StatusOr<ChiefJobState> state = cluster_.manifests.ReadJobState();
  if (!state.ok()) cluster_.report(absl::StrCat("ignoring the job state: ", state.status().message()));
  if (state.ok()) {
    cluster_.summary.failures_survived = state->failures_survived();
    cluster_.summary.rolled_back_steps = state->rolled_back_steps();
  }
  if (state.ok() && state->has_stopped_early_at_step()) {
    // A chief before this one ended the run early: it ends there again
    // (the schedule still spans job_steps).
    const int64_t at = state->stopped_early_at_step();
    if (at < 0 || at > cluster_.job_steps) {
      cluster_.report(absl::StrCat("ignoring the job state's stopped_early_at_step ", at, ": outside [0, ",
                                   cluster_.job_steps, "]"));
    } else {
      cluster_.end_step = at;
      cluster_.stopped_early_at_step = at;
      cluster_.summary.stopped_early_at_step = at;
      cluster_.report(absl::StrCat("early stopping decided before: ending at step ", at));
    }
  }
  if (state.ok() && state->running()) {
    cluster_.report("the previous chief of this job did not finish: taking over");
    cluster_.CountFailure();
  }
  // Generations go on from the job's record and from what its tasks hold,
  // never from this host's clock.
  cluster_.LearnGenerationFloor(state.ok() ? state->generation() : 0, state.ok() ? state->epoch() : 0);
  cluster_.NewGeneration();
  if (cluster_.shape.replicated) cluster_.NewEpoch();
  // The first deal, every stream from batch 0; a restore deals the
  // checkpoint's positions instead.
  RETURN_IF_ERROR(cluster_.DealStreams());
  if (cluster_.options.restore == "auto") {
    RETURN_IF_ERROR(recovery_.RestoreOrStartFresh());
    if (state.ok() && state->running()) {
      // Taking over: what the workers had pushed past the checkpoint under
      // the chief that died is redone, and counted (and said, as a
      // recovery says its own).
      int64_t rolled_back = 0;
      for (int i = 0; i < cluster_.NumWorkers() && i < static_cast<int>(cluster_.steps_at_takeover.size()); ++i) {
        rolled_back += std::max<int64_t>(0, cluster_.steps_at_takeover[i] - cluster_.workers[i].step);
      }
      cluster_.summary.rolled_back_steps += rolled_back;
      cluster_.SaveJobState(true);  // for the chief after this one
      cluster_.report(absl::StrCat("took over at the checkpoint of step ", cluster_.last_checkpoint_step,
                                   "; rolled_back_steps=", rolled_back));
    }
  } else if (cluster_.options.restore == "never") {
    RETURN_IF_ERROR(recovery_.StartFresh());
  } else {
    int64_t step;
    if (!absl::SimpleAtoi(cluster_.options.restore, &step)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--restore must be auto, never or a step, not \"", cluster_.options.restore, "\""));
    }
    ASSIGN_OR_RETURN(CheckpointManifest m, cluster_.manifests.Read(step));
    for (int p = 0; p < cluster_.NumPs(); ++p) {
      if (cluster_.StoreActive(p)) {
        RETURN_IF_ERROR(cluster_.CreateVariablesOn(p, /*reinitialize=*/false, /*restoring=*/true));
      }
    }
    RETURN_IF_ERROR(recovery_.RestoreAll(m));
    for (int i = 0; i < cluster_.NumWorkers(); ++i) {
      cluster_.workers[i].step = recovery_.StepAfterRestore(m, i);
    }
    recovery_.RestoreStreamsOf(m);
    cluster_.last_checkpoint_step = m.step();
    cluster_.summary.restored_from_step = m.step();
    cluster_.summary.checkpoints.push_back(m.step());
  }
  if (cluster_.last_checkpoint_step < 0) checkpoints_.TryCheckpoint();  // the base every recovery can go back to
  cluster_.last_checkpoint_time = ChiefNow();
  cluster_.last_eval_step = cluster_.MinStep();
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    absl::Status s = cluster_.StartWorker(i, cluster_.workers[i].step);
    if (!s.ok()) {
      cluster_.report(absl::StrCat("cannot start ", cluster_.workers[i].control->name(), " yet: ", s.message()));
    }
  }
  cluster_.EditStatus([&](JobStatusResponse* status) { status->set_state(JobStatusResponse::RUNNING); });
  return absl::OkStatus();
}

absl::StatusOr<std::optional<WarmStartValues>> Coordinator::ReadWarmStartIfFirst() {
  const TrainingJob& job = cluster_.options.job;
  if (!job.has_warm_start()) return std::nullopt;
  // TensorFlow's rule: only a job with no checkpoint of its own is warm
  // started (or one told to start afresh); any other restores its own.
  std::error_code ec;
  const std::filesystem::path source =
      std::filesystem::weakly_canonical(job.warm_start().ckpt_to_initialize_from(), ec);
  if (!ec && source == std::filesystem::weakly_canonical(cluster_.manifests.dir(), ec) && !ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("warm_start.ckpt_to_initialize_from: ", job.warm_start().ckpt_to_initialize_from(),
                     " is this job's own checkpoint directory; name another job's"));
  }
  const std::string& restore = cluster_.options.restore;
  if (restore != "auto" && restore != "never") {
    cluster_.report(absl::StrCat("warm_start ignored: --restore=", restore, " restores the job's own checkpoint"));
    return std::nullopt;
  }
  if (restore == "auto" && !cluster_.manifests.Steps().empty()) {
    cluster_.report(
        absl::StrCat("warm_start ignored: the job has checkpoints of its own in ", cluster_.manifests.dir()));
    return std::nullopt;
  }
  ASSIGN_OR_RETURN(CompiledModel model, CompileModel(job));
  ASSIGN_OR_RETURN(WarmStartValues warm, ReadWarmStart(job, model.variables));
  std::vector<std::string> names;
  for (const auto& [name, prev] : warm.source_name) {
    names.push_back(name == prev ? name : absl::StrCat(name, " (from ", prev, ")"));
  }
  cluster_.report(absl::StrCat("warm start: ", warm.values.size(), " of ", model.variables.size(), " variables from ",
                               warm.source, ": ", absl::StrJoin(names, ", "),
                               "; optimizer slots and the global step start fresh"));
  return warm;
}

absl::Status Coordinator::WaitForRegistration() {
  const int deadline_ms = cluster_.options.job.failure().register_deadline_ms();
  const absl::Time start = ChiefNow();
  while (true) {
    absl::Duration wait = absl::Minutes(1);
    if (deadline_ms > 0) wait = std::min(wait, start + absl::Milliseconds(deadline_ms) - ChiefNow());
    absl::Status s = cluster_.registry->WaitForAll(std::max(wait, absl::ZeroDuration()));
    if (s.ok() || s.code() != absl::StatusCode::kDeadlineExceeded) return s;
    if (deadline_ms > 0 && ChiefNow() - start >= absl::Milliseconds(deadline_ms)) return s;
    cluster_.report(
        absl::StrCat("still waiting (", FormatEta(absl::ToDoubleSeconds(ChiefNow() - start)), "): ", s.message()));
    cluster_.EditStatus([&](JobStatusResponse* status) { status->set_waiting_for(std::string(s.message())); });
  }
}

absl::StatusOr<JobSummary> Coordinator::Run() {
  start_time_ = ChiefNow();
  cluster_.summary.job_name = cluster_.options.job.name();
  cluster_.summary.checkpoint_dir = cluster_.manifests.dir();
  absl::Status s = Setup();
  int64_t first_steps = 0;  // restored workers resume mid-run: count only this run's steps
  for (const WorkerView& w : cluster_.workers) first_steps += w.step;
  bool done = false;
  const int final_wait_ms = cluster_.options.job.failure().final_checkpoint_wait_ms();
  const absl::Duration final_wait = final_wait_ms < 0    ? absl::InfiniteDuration()
                                    : final_wait_ms == 0 ? absl::Minutes(10)
                                                         : absl::Milliseconds(final_wait_ms);
  absl::Time final_since = absl::InfiniteFuture();  // the first failed final checkpoint
  while (s.ok()) {
    while (s.ok() && !done) {
      cluster_.registry->WaitForChange(cluster_.registry->version(), cluster_.options.poll_interval);
      s = Watch(&done);
    }
    if (!s.ok()) break;
    Report(true);
    if (cluster_.last_checkpoint_step == cluster_.MinStep()) break;
    // The final checkpoint. If a PS failed at the very end, the watch loop
    // recovers (workers redo the steps since the last checkpoint) or waits.
    absl::Status c = checkpoints_.Checkpoint();
    if (c.ok()) break;
    if (final_since == absl::InfiniteFuture()) final_since = ChiefNow();
    if (ChiefNow() - final_since >= final_wait) {
      s = absl::DataLossError(
          absl::StrCat("training finished at step ", cluster_.MinStep(),
                       " but its final checkpoint could not be committed for ", absl::FormatDuration(final_wait),
                       " (failure.final_checkpoint_wait_ms): ", c.message(), ". The last committed checkpoint is ",
                       cluster_.last_checkpoint_step < 0 ? std::string("none")
                                                         : absl::StrCat("step ", cluster_.last_checkpoint_step),
                       "; the PS keep the trained parameters and the workers wait: fix the snapshot store and restart "
                       "the chief (it restores that checkpoint and trains the steps since again)"));
      break;
    }
    cluster_.report(absl::StrCat("final checkpoint failed, watching and trying again: ", c.message()));
    done = false;
    absl::SleepFor(checkpoints_.BackoffAfterFinalFailure());
  }
  if (s.ok() && evaluator_) {
    absl::Status e = Evaluate(cluster_.MinStep());
    if (!e.ok()) {
      cluster_.report(absl::StrCat("final evaluation failed: ", e.message()));
      // An earlier evaluation's figures are not the final ones.
      cluster_.summary.metrics.clear();
      cluster_.summary.final_evaluation_error = std::string(e.message());
    }
  }
  cluster_.summary.steps = cluster_.MinStep();
  cluster_.summary.final_loss = Status().loss();
  cluster_.summary.wall_seconds = absl::ToDoubleSeconds(ChiefNow() - start_time_);
  int64_t trained_steps = -first_steps;
  for (const WorkerView& w : cluster_.workers) trained_steps += w.step;
  cluster_.summary.examples_per_sec = cluster_.summary.wall_seconds > 0
                                          ? static_cast<double>(trained_steps) *
                                                std::max(1, cluster_.options.job.input().batch_size()) /
                                                cluster_.summary.wall_seconds
                                          : 0;
  cluster_.EditStatus([&](JobStatusResponse* status) {
    status->set_state(s.ok() ? JobStatusResponse::DONE : JobStatusResponse::FAILED);
    if (!s.ok()) status->set_error(std::string(s.message()));
  });
  if (!s.ok()) return s;
  // Only a finished job lets its tasks go; after a failure they wait,
  // parked, for the next chief.
  cluster_.SaveJobState(false);
  for (WorkerView& w : cluster_.workers) {
    if (!w.left) (void)w.control->Shutdown();  // one that left is gone
  }
  return cluster_.summary;
}

WatchState Coordinator::CoreState() const {
  WatchState s;
  for (const PsView& p : cluster_.ps) s.ps.push_back(p);  // the records, not the clients
  s.ps_lost = cluster_.roles.lost;
  for (const WorkerView& w : cluster_.workers) s.workers.push_back(w);
  s.generation = cluster_.generation;
  s.end_step = cluster_.end_step;
  s.last_checkpoint_step = cluster_.last_checkpoint_step;
  s.last_checkpoint_time = cluster_.last_checkpoint_time;
  s.next_checkpoint_try = checkpoints_.next_try();
  s.last_eval_step = cluster_.last_eval_step;
  return s;
}

void Coordinator::AdoptCoreState(const WatchState& s) {
  // The core updates only the records; the rest is the shell's to change.
  for (int p = 0; p < cluster_.NumPs() && p < static_cast<int>(s.ps.size()); ++p) {
    static_cast<PsRecord&>(cluster_.ps[p]) = s.ps[p];
  }
  for (int i = 0; i < cluster_.NumWorkers() && i < static_cast<int>(s.workers.size()); ++i) {
    static_cast<WorkerRecord&>(cluster_.workers[i]) = s.workers[i];
  }
}

std::vector<std::optional<PsProbe>> Coordinator::ProbeStores() {
  std::vector<std::optional<PsProbe>> out(cluster_.NumPs());
  std::vector<std::thread> calls;
  const absl::Duration timeout = cluster_.shape.ps_probe_timeout;
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (!cluster_.StoreActive(p) || cluster_.LostToFailover(p)) continue;  // a lost PS's stores moved
    calls.emplace_back([this, p, timeout, &out] {
      PsProbe probe;
      probe.asked = ChiefNow();
      absl::StatusOr<PsStatusResponse> st = cluster_.ps[p].admin->Status(timeout);
      if (st.ok()) {
        probe.answer = *std::move(st);
      } else {
        probe.error = st.status();
      }
      out[p] = std::move(probe);
    });
  }
  for (std::thread& t : calls) t.join();
  return out;
}

std::vector<std::optional<WorkerProbe>> Coordinator::ProbeWorkers() {
  std::vector<std::optional<WorkerProbe>> out(cluster_.NumWorkers());
  cluster_.ForEachWorker([&](int i) {
    if (cluster_.workers[i].left) return absl::OkStatus();  // gone for good; back only as a new process
    WorkerProbe probe;
    absl::StatusOr<WorkerStatusResponse> st = cluster_.workers[i].control->Status(absl::Seconds(2));
    if (st.ok()) {
      probe.answer = *std::move(st);
    } else {
      probe.error = st.status();
    }
    out[i] = std::move(probe);
    return absl::OkStatus();
  });
  return out;
}

absl::Status Coordinator::RunCommand(const WatchCommand& c) {
  switch (c.kind) {
    case WatchCommand::kSay:
      cluster_.report(c.why);
      return absl::OkStatus();
    case WatchCommand::kStartWorker: {
      absl::Status s = cluster_.StartWorker(c.index, c.step);
      if (s.code() == absl::StatusCode::kInvalidArgument) {
        // The worker refuses the assignment itself: asking again, many
        // times a second, would not change its answer.
        absl::Status refused = absl::FailedPreconditionError(
            absl::StrCat(cluster_.workers[c.index].control->name(), " refuses its assignment: ", s.message()));
        refused.SetPayload(kAssignmentRefusedPayload, absl::Cord(cluster_.workers[c.index].control->name()));
        return refused;
      }
      if (!s.ok()) {
        cluster_.report(absl::StrCat("starting ", cluster_.workers[c.index].control->name(), ": ", s.message()));
      }
      return absl::OkStatus();
    }
    case WatchCommand::kRestartWorker: {
      // What the stores applied of the worker decides where it starts.
      WatchState state = CoreState();
      const std::vector<WatchCommand> then = core_.DecideRestart(c.index, ProbeStores(), &state);
      AdoptCoreState(state);
      for (const WatchCommand& next : then) RETURN_IF_ERROR(RunCommand(next));
      return absl::OkStatus();
    }
    case WatchCommand::kResumeWorker: {
      absl::Status s = cluster_.workers[c.index].control->Resume(c.step, cluster_.generation, cluster_.Route(),
                                                                 cluster_.ResumeEndStep(c.step));
      if (!s.ok()) {
        cluster_.report(absl::StrCat("resuming ", cluster_.workers[c.index].control->name(), ": ", s.message()));
      }
      return absl::OkStatus();
    }
    case WatchCommand::kFailover:
      return failover_.Failover(c.index, c.why);
    case WatchCommand::kRecover:
      return recovery_.Recover(c.why, c.failure);
    case WatchCommand::kShrinkGroup:
      group_.Shrink(c.index, c.down);
      return recovery_.Recover(c.why);
    case WatchCommand::kChangeMembership:
      return worker_membership_.Change(c.why, c.joining);
    case WatchCommand::kRejoinGroup: {
      // The members' progress first: the group re-forms from this
      // checkpoint (if it fails, from the one before).
      absl::Status saved = checkpoints_.Checkpoint();
      if (!saved.ok()) cluster_.report(absl::StrCat("checkpoint before growing the group failed: ", saved.message()));
      RETURN_IF_ERROR(group_.Readmit(c.index));
      return recovery_.Recover(absl::StrCat(cluster_.workers[c.index].control->name(),
                                            " is back: the collective group grows to ", cluster_.GroupMembers().size()),
                               /*failure=*/false);
    }
    case WatchCommand::kFail:
      return absl::Status(c.code, c.why);
  }
  return absl::InternalError(absl::StrCat("unknown watch command ", static_cast<int>(c.kind)));
}

absl::Status Coordinator::Watch(bool* done) {
  // Parameter stores first: a lost one means a restore (or a failover),
  // and the workers' state is moot until it is done.
  WatchState state = CoreState();
  std::vector<std::optional<PsProbe>> probes = ProbeStores();
  // Updates applied (a variable's count, which its learning rate follows):
  // the most of any store that answered (after a restore, the restored).
  int64_t applied = -1;
  for (const std::optional<PsProbe>& p : probes) {
    if (p.has_value() && p->error.ok()) applied = std::max(applied, p->answer.global_step());
  }
  if (applied >= 0) stores_global_step_ = applied;
  const PsPass stores = core_.DecideStores(std::move(probes), ChiefNow(), &state);
  AdoptCoreState(state);
  cluster_.EditStatus([&](JobStatusResponse* status) { status->set_waiting_for(stores.waiting_for); });
  for (const WatchCommand& c : stores.commands) {
    RETURN_IF_ERROR(RunCommand(c));
    if (c.EndsPass()) return absl::OkStatus();
  }
  const bool all_ps_answer = stores.all_answer;

  // Membership: workers and PS that join or leave (their I/O is here).
  if (cluster_.shape.elastic) {
    ASSIGN_OR_RETURN(bool changed, worker_membership_.Watch());
    if (changed) return absl::OkStatus();
  }
  if (cluster_.shape.elastic_ps && all_ps_answer) {
    ASSIGN_OR_RETURN(bool moved, ps_membership_.Watch());
    if (moved) return absl::OkStatus();
  }

  // Workers.
  state = CoreState();
  const WorkerPass workers = core_.DecideWorkers(ProbeWorkers(), all_ps_answer, ChiefNow(), &state);
  AdoptCoreState(state);
  for (const WatchCommand& c : workers.commands) {
    RETURN_IF_ERROR(RunCommand(c));
    if (c.EndsPass()) return absl::OkStatus();
  }
  if (cluster_.stopped_early_at_step >= 0) {
    // A worker past the early end was never told it (it did not answer
    // the pause, or was out of reach): paused and resumed with the end, it
    // is done at once (as every worker resumed now runs only to the end).
    for (const WorkerView& w : cluster_.workers) {
      if (w.removed || w.left || !w.reachable || w.state != WorkerStatusResponse::RUNNING) continue;
      if (w.step <= cluster_.end_step) continue;
      cluster_.report(absl::StrCat(w.control->name(), " runs past the early end at step ", cluster_.end_step, " (at ",
                                   w.step, "): telling it"));
      cluster_.ResumeWorkers(cluster_.PauseWorkers(), "the early end");
      return absl::OkStatus();
    }
  }
  PublishProgress(workers);
  cluster_.summary.examples_per_sec_last_window = workers.examples_per_sec;
  Report(false);
  if (!workers.all_done && all_ps_answer) {  // a PS lost to a failover that is back: a backup again
    ASSIGN_OR_RETURN(bool rebuilt, failover_.MaybeRebuild());
    if (rebuilt) return absl::OkStatus();
  }
  const NextSteps next = core_.DecideNext(workers.all_done, all_ps_answer, ChiefNow(), CoreState());
  if (next.done) {
    *done = true;
    return absl::OkStatus();
  }
  if (next.checkpoint) checkpoints_.TryCheckpoint();
  if (next.evaluate) {
    const int64_t step = cluster_.MinStep();
    absl::Status e = Evaluate(step);
    if (!e.ok()) {
      cluster_.report(absl::StrCat("evaluation at step ", step, " failed (training goes on): ", e.message()));
      cluster_.last_eval_step = step;
    } else if (early_stopping_.has_value() && cluster_.stopped_early_at_step < 0) {
      auto it = cluster_.summary.metrics.find(early_stopping_->monitor());
      if (it == cluster_.summary.metrics.end()) {
        cluster_.report(absl::StrCat("early stopping: the evaluation at step ", step, " has no ",
                                     early_stopping_->monitor(), "; not counted"));
      } else if (early_stopping_->Observe(step, it->second)) {
        StopEarly(early_stopping_->Why());
      }
    }
  }
  return absl::OkStatus();
}

void Coordinator::StopEarly(const std::string& why) {
  // Every worker at a step boundary, then the end where the furthest one
  // stands (under SYNC at most one step past the group's, the step its
  // push already went into; a collective group's members all stand at
  // one step): each runs to it and is done, and the final checkpoint and
  // evaluation are taken there, as at a normal end.
  const std::vector<bool> paused = cluster_.PauseWorkers();
  int64_t end = -1;
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    const WorkerView& w = cluster_.workers[i];
    if (w.removed && w.streams.empty()) continue;
    end = std::max(end, w.step);
  }
  if (end < 0 || end >= cluster_.end_step) {
    cluster_.report(absl::StrCat("early stopping: ", why, "; the run ends at step ", cluster_.end_step, " anyway"));
    cluster_.ResumeWorkers(paused, "early stopping");
    return;
  }
  // Recorded before any worker is told: a chief restarted from here on
  // ends the run at the same step.
  cluster_.end_step = end;
  cluster_.stopped_early_at_step = end;
  cluster_.summary.stopped_early_at_step = end;
  cluster_.SaveJobState(true);
  cluster_.report(absl::StrCat("early stopping: ", why, "; ending at step ", end));
  cluster_.ResumeWorkers(paused, "early stopping");
}

void Coordinator::PublishProgress(const WorkerPass& workers) {
  if (!lr_schedule_) {
    absl::StatusOr<std::unique_ptr<Optimizer>> o = Optimizer::Create(cluster_.StoreOptimizer());
    if (o.ok()) lr_schedule_ = *std::move(o);
  }
  cluster_.EditStatus([&](JobStatusResponse* status) {
    status->set_step(cluster_.MinStep());
    status->set_examples_per_sec(workers.examples_per_sec);
    // The mean of the losses and training metrics of the workers' last
    // pushed steps, and the (mean) step they are from: a worker that has
    // pushed nothing since it started has none to give.
    float loss = 0;
    int64_t loss_step = 0;
    int contributors = 0;
    std::map<std::string, float> train_metric;
    for (const WorkerView& w : cluster_.workers) {
      if (w.removed || w.loss_step < 0) continue;
      ++contributors;
      loss += w.loss;
      loss_step += w.loss_step;
      for (const auto& [name, value] : w.train_metric) train_metric[name] += value;
    }
    status->set_loss(contributors > 0 ? loss / contributors : 0);
    status->set_loss_step(contributors > 0 ? loss_step / contributors : -1);
    status->clear_train_metric();
    for (const auto& [name, sum] : train_metric) (*status->mutable_train_metric())[name] = sum / contributors;
    if (lr_schedule_) status->set_learning_rate(lr_schedule_->LearningRate(std::max<int64_t>(1, stores_global_step_)));
    status->set_last_checkpoint_step(cluster_.last_checkpoint_step);
    status->set_failures_survived(cluster_.summary.failures_survived);
    status->set_checkpoint_failures(checkpoints_.failures_in_a_row());
    status->set_membership_changes(cluster_.membership_changes);
    status->clear_member();
    for (int m : cluster_.GroupMembers()) status->add_member(cluster_.workers[m].control->name());
  });
}

void Coordinator::Report(bool force) {
  absl::Time now = ChiefNow();
  if (!force && now - last_report_ < cluster_.options.report_interval) return;
  last_report_ = now;
  JobStatusResponse s = Status();
  if (s.state() == JobStatusResponse::WAITING_FOR_TASKS) {
    cluster_.report("waiting for every task to register");
    return;
  }
  int64_t step = cluster_.MinStep();
  double frac = cluster_.end_step > 0 ? static_cast<double>(step) / cluster_.end_step : 0;
  double per_step_s = 0;
  int64_t done_steps = step - std::max<int64_t>(0, cluster_.summary.restored_from_step);
  if (done_steps > 0) per_step_s = absl::ToDoubleSeconds(now - start_time_) / done_steps;
  int epoch = 0;
  for (const TaskState& t : cluster_.registry->All()) epoch = std::max(epoch, t.epoch);
  // A worker's epoch is its batch's first example's; the last step of each
  // epoch also reads the next one's first examples, so by the end of an
  // epochs job a batch starts one pass beyond ("epoch 16" of 15): the
  // job's last epoch it still is.
  const int shown_epoch = cluster_.options.job.steps() <= 0 && cluster_.options.job.epochs() > 0
                              ? std::min(epoch + 1, cluster_.options.job.epochs())
                              : epoch + 1;
  if (cluster_.options.scalar) {
    // Each training scalar at the step its loss is from, once a step (a
    // report with no newer step writes none; after a restore the steps
    // go back and are written again).
    if (s.loss_step() >= 0 && s.loss_step() != last_scalar_step_) {
      last_scalar_step_ = s.loss_step();
      cluster_.options.scalar("loss", s.loss_step(), s.loss());
      for (const auto& [name, value] : s.train_metric()) cluster_.options.scalar("train/" + name, s.loss_step(), value);
      if (lr_schedule_) cluster_.options.scalar("learning_rate", s.loss_step(), s.learning_rate());
    }
    cluster_.options.scalar("examples_per_sec", step, static_cast<float>(s.examples_per_sec()));
  }
  cluster_.report(absl::StrFormat("step %d/%d (%.1f%%) epoch %d loss %.4f examples/s %.0f eta %s checkpoint %d", step,
                                  cluster_.end_step, 100 * frac, shown_epoch, s.loss(), s.examples_per_sec(),
                                  FormatEta(per_step_s * (cluster_.end_step - step)), cluster_.last_checkpoint_step));
}

absl::Status Coordinator::Evaluate(int64_t step) {
  // Every dense variable, whole: shards of a partitioned one are joined by rows.
  // Hash tables are read by rows as the test batches need them, from the
  // PS, without making rows for ids training never saw.
  std::map<std::string, Tensor> variables;
  PlacementMap tables;
  for (const VariablePlacement& vp : cluster_.plan.placement.variable()) {
    if (vp.variable().kind() == VariableDef::HASH_TABLE) {
      *tables.add_variable() = vp;
      continue;
    }
    std::vector<Tensor> parts;
    for (const VariablePlacement::Shard& shard : vp.shard()) {
      // A replica's variables from the first member (all hold the same).
      const int store = cluster_.shape.IsReplica(shard.ps_task())
                            ? cluster_.shape.num_ps_tasks + cluster_.GroupMembers().front()
                            : shard.ps_task();
      ASSIGN_OR_RETURN(auto pulled, cluster_.StoreAdmin(store)->Pull({vp.variable().name()}, cluster_.generation));
      if (pulled.size() != 1) {
        return absl::InternalError(absl::StrCat(cluster_.StoreAdmin(store)->name(), " returned ", pulled.size(),
                                                " tensors for ", vp.variable().name()));
      }
      parts.push_back(pulled[0].second);
    }
    if (parts.size() == 1) {
      variables[vp.variable().name()] = parts[0];
      continue;
    }
    ASSIGN_OR_RETURN(TensorShape shape, TensorShape::FromProto(vp.variable().shape()));
    Tensor whole(parts[0].dtype(), shape);
    size_t offset = 0;
    for (const Tensor& part : parts) {
      std::memcpy(static_cast<char*>(whole.raw_data()) + offset, part.raw_data(), part.TotalBytes());
      offset += part.TotalBytes();
    }
    variables[vp.variable().name()] = whole;
  }
  RowReader read_rows;
  std::unique_ptr<PsClient> rows_client;
  if (tables.variable_size() > 0) {
    std::vector<std::string> addresses;
    for (int p = 0; p < cluster_.shape.num_ps_tasks; ++p) {
      ASSIGN_OR_RETURN(std::string a, cluster_.options.cluster.AddressOf(MakeTaskId(kPsJob, p)));
      addresses.push_back(a);
    }
    PsClientOptions o;
    o.worker = -1;  // the chief: never waits for a SYNC step
    o.read_only_rows = true;
    rows_client = std::make_unique<PsClient>(tables, addresses, cluster_.channels, o);
    rows_client->SetGeneration(cluster_.generation);
    if (cluster_.shape.replicated) rows_client->SetRoute(cluster_.Route());
    read_rows = [&rows_client, step](const std::string& table, const Tensor& ids) -> absl::StatusOr<Tensor> {
      ASSIGN_OR_RETURN(TensorMap rows, rows_client->PullRows({{table, ids}}, step));
      auto it = rows.find(table);
      if (it == rows.end()) return absl::InternalError(absl::StrCat("no rows of ", table, " came back"));
      return it->second;
    };
  }
  ASSIGN_OR_RETURN(auto metrics, evaluator_(variables, read_rows));
  cluster_.summary.metrics = metrics;
  cluster_.last_eval_step = step;
  cluster_.EditStatus([&](JobStatusResponse* status) {
    status->set_eval_step(step);
    status->clear_eval_metric();
    for (const auto& [k, v] : metrics) {
      if (k != "examples") (*status->mutable_eval_metric())[k] = v;
    }
  });
  std::vector<std::string> parts;
  for (const auto& [k, v] : metrics) {
    parts.push_back(absl::StrCat(k, " ", v));
    if (cluster_.options.scalar && k != "examples") cluster_.options.scalar("eval/" + k, step, v);
  }
  cluster_.report(absl::StrCat("eval at step ", step, ": ", absl::StrJoin(parts, ", ")));
  return absl::OkStatus();
}

std::string JobSummary::ToJson() const {
  std::vector<std::string> m;
  for (const auto& [k, v] : metrics) m.push_back(absl::StrCat("\"", k, "\": ", v));
  return absl::StrCat(
      "{\n  \"job\": \"", job_name, "\",\n  \"metrics\": {", absl::StrJoin(m, ", "),
      "},\n  \"final_loss\": ", final_loss, ",\n  \"steps\": ", steps, ",\n  \"total_steps\": ", total_steps,
      ",\n  \"restored_from_step\": ", restored_from_step, ",\n  \"wall_seconds\": ", wall_seconds,
      ",\n  \"examples_per_sec\": ", examples_per_sec,
      ",\n  \"examples_per_sec_last_window\": ", examples_per_sec_last_window, ",\n  \"checkpoints\": [",
      absl::StrJoin(checkpoints, ", "), "],\n  \"checkpoint_dir\": \"", checkpoint_dir,
      "\",\n  \"failures_survived\": ", failures_survived, ",\n  \"failovers\": ", failovers,
      ",\n  \"rolled_back_steps\": ", rolled_back_steps, ",\n  \"rebuilds\": ", rebuilds,
      stopped_early_at_step < 0 ? "" : absl::StrCat(",\n  \"stopped_early_at_step\": ", stopped_early_at_step),
      final_evaluation_error.empty()
          ? ""
          : absl::StrCat(",\n  \"final_evaluation_error\": ", JsonString(final_evaluation_error)),
      "\n}\n");
}

bool IsAssignmentRefused(const absl::Status& s) { return s.GetPayload(kAssignmentRefusedPayload).has_value(); }

}  // namespace psrt
