#include "chief/coordinator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "common/input/source.h"
#include "common/plan/placement.h"

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

WatchRules WatchRulesFor(const TrainingJob& job, int num_ps_tasks, bool has_evaluator) {
  const FailurePolicy& f = job.failure();
  WatchRules r;
  r.collective = IsCollective(job);
  r.sync = r.collective || job.consistency().mode() == ConsistencyDef::SYNC;
  r.replicated = ReplicationFactor(job) == 2;
  r.num_ps_tasks = num_ps_tasks;
  r.failover_after = absl::Milliseconds(job.replication().failover_after_ms() > 0 ? job.replication().failover_after_ms() : 500);
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

Coordinator::Coordinator(CoordinatorOptions options, TaskRegistry* registry,
                         ChannelCache* channels, Planner planner, Evaluator evaluator)
    : options_(std::move(options)),
      registry_(registry),
      channels_(channels),
      planner_(std::move(planner)),
      evaluator_(std::move(evaluator)),
      core_(WatchRulesFor(options_.job, options_.cluster.NumTasks(kPsJob), static_cast<bool>(evaluator_))),
      report_(options_.report ? options_.report
                              : [](const std::string& line) { LOG(INFO) << line; }),
      manifests_(CheckpointDir(options_)) {
  // The parameter stores: the PS tasks, then under a collective strategy
  // each worker's replica (served on the worker's own port). Checkpoints
  // and recoveries treat them alike.
  for (int i = 0; i < NumPsTasks(); ++i) {
    TaskId t = MakeTaskId(kPsJob, i);
    PsView v;
    v.name = TaskName(t);
    v.admin = std::make_unique<PsAdmin>(channels_->Get(*options_.cluster.AddressOf(t)), v.name);
    ps_.push_back(std::move(v));
  }
  for (int i = 0; Collective() && i < options_.cluster.NumTasks(kWorkerJob); ++i) {
    TaskId t = MakeTaskId(kWorkerJob, i);
    PsView v;
    v.name = TaskName(t) + " (replica)";
    v.admin = std::make_unique<PsAdmin>(channels_->Get(*options_.cluster.AddressOf(t)), v.name);
    ps_.push_back(std::move(v));
  }
  for (int i = 0; i < options_.cluster.NumTasks(kWorkerJob); ++i) {
    TaskId t = MakeTaskId(kWorkerJob, i);
    WorkerView v;
    v.name = TaskName(t);
    v.control = std::make_unique<WorkerControl>(channels_->Get(*options_.cluster.AddressOf(t)), v.name);
    workers_.push_back(std::move(v));
  }
  // Workers beyond the spec may join up to failure.max_workers.
  if (Elastic()) registry_->AdmitWorkersUpTo(options_.job.failure().max_workers());
  // PS beyond the spec may join up to failure.max_ps, and PS may leave.
  if (ElasticPs()) registry_->AdmitPsUpTo(std::max(options_.job.failure().max_ps(), NumPsTasks()));
  if (options_.job.failure().max_ps() > 0 && !ElasticPs()) {
    report_("job.failure.max_ps is ignored: " + ElasticPsRefusal() + "; no PS joins or leaves this job");
  }
  absl::MutexLock lock(&mu_);
  status_.set_state(JobStatusResponse::WAITING_FOR_TASKS);
  status_.set_eval_step(-1);
  status_.set_loss_step(-1);
}

JobStatusResponse Coordinator::Status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

int Coordinator::ActiveWorkers() const {
  int n = 0;
  for (const WorkerView& w : workers_) n += w.removed ? 0 : 1;
  return std::max(n, 1);
}

WorkerAssignment Coordinator::AssignmentFor(int i, int64_t step) const {
  WorkerAssignment a;
  *a.mutable_graph() = plan_.graph;
  *a.mutable_placement() = plan_.placement;
  *a.mutable_input() = options_.job.input();
  *a.mutable_consistency() = options_.job.consistency();
  a.set_shard_index(i);
  a.set_num_shards(NumWorkers());
  const WorkerView& w = workers_[i];
  if (Elastic() && !w.streams.empty()) {
    // Its streams where `step` finds them, the one `step` reads first.
    std::vector<StreamPos> at = PositionsAt(w.streams, w.stream_base, step);
    const int64_t m = static_cast<int64_t>(at.size());
    std::rotate(at.begin(), at.begin() + (((step - w.stream_base) % m) + m) % m, at.end());
    a.set_num_shards(NumStreams());
    a.set_shard_index(at[0].index);
    for (const StreamPos& p : at) {
      DataStream* d = a.add_stream();
      d->set_index(p.index);
      d->set_start_batch(p.batch);
    }
  }
  a.set_start_step(step);
  a.set_end_step(end_step_);
  a.set_loss_node(plan_.loss_node);
  for (const auto& [var, node] : plan_.gradient_node) (*a.mutable_gradient_node())[var] = node;
  for (const auto& m : plan_.metric_nodes) a.add_metric_node(m);
  a.set_seed(options_.job.seed());
  a.set_chief_incarnation(options_.incarnation);
  if (Replicated()) *a.mutable_route() = Route();
  a.set_generation(generation_);
  for (const TaskState& t : registry_->All()) {
    if (t.info.task().job() == kPsJob) *a.add_ps() = t.info;
  }
  if (Collective()) {
    // Synchronous by construction; a new group (id = generation) at every
    // start, so a member restarted since cannot join an old formation. Its
    // members are the workers not removed; each reads the data shard of its
    // rank, so a smaller group still reads all the data.
    a.mutable_consistency()->set_mode(ConsistencyDef::SYNC);
    const std::vector<int> members = GroupMembers();
    const int rank = static_cast<int>(std::find(members.begin(), members.end(), i) - members.begin());
    a.set_shard_index(rank);
    a.set_num_shards(static_cast<int>(members.size()));
    CollectiveGroup* g = a.mutable_collective();
    g->set_rank(rank);
    g->set_size(static_cast<int>(members.size()));
    for (int w : members) {
      g->add_peer(registry_->Get(MakeTaskId(kWorkerJob, w)).info.collective_address());
    }
    g->set_group_id(static_cast<uint64_t>(generation_));
    g->set_timeout_ms(CollectiveTimeoutMs(options_.job));
    a.set_local_devices(LocalDevices(options_.job));
  }
  return a;
}

absl::Status Coordinator::CreateVariablesOn(int ps, bool reinitialize, bool restoring) {
  CreateVariablesRequest req;
  // Store index NumPsTasks() in the plan is "the worker's replica": every
  // replica holds what is placed there.
  for (VariableDef& v : VariablesOnStore(plan_.placement, IsReplica(ps) ? NumPsTasks() : ps)) {
    *req.add_variable() = std::move(v);
  }
  // A schedule over "the whole job" in updates of a variable: every
  // worker's pushes in ASYNC, one a step in SYNC (all workers of the spec,
  // so the definition stays the same when a SYNC group shrinks).
  *req.mutable_optimizer() = StoreOptimizer();
  *req.mutable_consistency() = options_.job.consistency();
  req.set_num_workers(ActiveWorkers());
  if (IsReplica(ps)) {
    // A replica has one writer, its worker, which applies each step's
    // all-reduced mean at once.
    req.mutable_consistency()->set_mode(ConsistencyDef::ASYNC);
    req.set_num_workers(1);
  } else if (Collective()) {
    // Hybrid's PS: every worker's rows of every step, applied as they come.
    req.mutable_consistency()->set_mode(ConsistencyDef::ASYNC);
    *req.mutable_optimizer() = ResolveSchedule(options_.job.optimizer(), end_step_ * options_.cluster.NumTasks(kWorkerJob));
  } else {
    // Who trains, by task index (after joins and leaves not 0..N-1), and
    // where each starts: BOUNDED_STALENESS waits for these workers only.
    // A fresh start has no steps to give (every counter goes back to 0).
    for (int i = 0; i < NumWorkers(); ++i) {
      if (workers_[i].removed) continue;
      req.add_active_workers(i);
      if (!reinitialize) req.add_active_worker_steps(workers_[i].step);
    }
  }
  req.set_chief_incarnation(options_.incarnation);
  req.set_generation(generation_);
  req.set_reinitialize(reinitialize);
  if (Replicated()) return ConfigureStore(ps, std::move(req));
  // The incarnation that created them still registered: a reconfiguration
  // (a stopped PS then holds a membership change up 5 s, not 30).
  const bool reconfigure = !reinitialize && ps_[ps].incarnation != 0 &&
                           registry_->Get(MakeTaskId(kPsJob, ps)).info.incarnation() == ps_[ps].incarnation;
  ASSIGN_OR_RETURN(CreateVariablesResponse resp, ps_[ps].admin->CreateVariables(req, reconfigure));
  if (!reinitialize && !restoring && ps_[ps].incarnation != 0 && resp.incarnation() != ps_[ps].incarnation) {
    // A PS restarted since: what it held is gone, and the variables just
    // created there hold their initial values. Taking its incarnation here
    // would hide that from the watch (seen: a membership change adopted a
    // restarted ps:0 and training went on from fresh values with no
    // restore); the watch restores it.
    return absl::UnavailableError(absl::StrCat(ps_[ps].admin->name(), " restarted (incarnation ",
                                               resp.incarnation(), ", not ", ps_[ps].incarnation,
                                               "): its state is gone; it is restored from the checkpoint"));
  }
  ps_[ps].incarnation = resp.incarnation();
  return absl::OkStatus();
}

absl::Status Coordinator::StartWorker(int i, int64_t step) {
  RETURN_IF_ERROR(workers_[i].control->Start(AssignmentFor(i, step)));
  workers_[i].step = step;
  workers_[i].state = WorkerStatusResponse::RUNNING;
  workers_[i].incarnation = registry_->Get(MakeTaskId(kWorkerJob, i)).info.incarnation();
  workers_[i].reachable = true;  // it answered
  return absl::OkStatus();
}

absl::Status Coordinator::WaitForRegistration() {
  const int deadline_ms = options_.job.failure().register_deadline_ms();
  const absl::Time start = ChiefNow();
  while (true) {
    absl::Duration wait = absl::Minutes(1);
    if (deadline_ms > 0) wait = std::min(wait, start + absl::Milliseconds(deadline_ms) - ChiefNow());
    absl::Status s = registry_->WaitForAll(std::max(wait, absl::ZeroDuration()));
    if (s.ok() || s.code() != absl::StatusCode::kDeadlineExceeded) return s;
    if (deadline_ms > 0 && ChiefNow() - start >= absl::Milliseconds(deadline_ms)) return s;
    report_(absl::StrCat("still waiting (", FormatEta(absl::ToDoubleSeconds(ChiefNow() - start)),
                         "): ", s.message()));
    absl::MutexLock lock(&mu_);
    status_.set_waiting_for(std::string(s.message()));
  }
}

absl::Status Coordinator::Setup() {
  const TrainingJob& job = options_.job;
  RETURN_IF_ERROR(CheckStrategy(job, options_.cluster.NumTasks(kPsJob), NumWorkers()));
  if (Replicated()) InitReplicas();
  Report(true);
  RETURN_IF_ERROR(WaitForRegistration());
  {
    absl::MutexLock lock(&mu_);
    status_.clear_waiting_for();
  }
  ASSIGN_OR_RETURN(plan_, planner_(job, NumPsTasks()));
  RETURN_IF_ERROR(ShareReplicaVariables());

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

  // Failures survived so far, kept beside the manifests; a chief that finds
  // the job still marked running took over from one that died.
  absl::StatusOr<ChiefJobState> state = manifests_.ReadJobState();
  if (!state.ok()) report_(absl::StrCat("ignoring the job state: ", state.status().message()));
  if (state.ok()) summary_.failures_survived = state->failures_survived();
  if (state.ok() && state->running()) {
    report_("the previous chief of this job did not finish: taking over");
    CountFailure();
  }
  // Generations go on from the job's record and from what its tasks hold,
  // never from this host's clock.
  LearnGenerationFloor(state.ok() ? state->generation() : 0, state.ok() ? state->epoch() : 0);
  NewGeneration();
  if (Replicated()) NewEpoch();
  // The first deal, every stream from batch 0; a restore deals the
  // checkpoint's positions instead.
  RETURN_IF_ERROR(DealStreams());
  if (options_.restore == "auto") {
    RETURN_IF_ERROR(RestoreOrStartFresh());
    if (state.ok() && state->running()) {
      // Taking over: what the workers had pushed past the checkpoint under
      // the chief that died is redone, and counted.
      for (int i = 0; i < NumWorkers() && i < static_cast<int>(steps_at_takeover_.size()); ++i) {
        summary_.rolled_back_steps += std::max<int64_t>(0, steps_at_takeover_[i] - workers_[i].step);
      }
    }
  } else if (options_.restore == "never") {
    RETURN_IF_ERROR(StartFresh());
  } else {
    int64_t step;
    if (!absl::SimpleAtoi(options_.restore, &step)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--restore must be auto, never or a step, not \"", options_.restore, "\""));
    }
    ASSIGN_OR_RETURN(CheckpointManifest m, manifests_.Read(step));
    for (int p = 0; p < NumPs(); ++p) {
      if (StoreActive(p)) RETURN_IF_ERROR(CreateVariablesOn(p, /*reinitialize=*/false, /*restoring=*/true));
    }
    RETURN_IF_ERROR(RestoreAll(m));
    for (int i = 0; i < NumWorkers(); ++i) {
      workers_[i].step = StepAfterRestore(m, i);
    }
    RestoreStreamsOf(m);
    last_checkpoint_step_ = m.step();
    summary_.restored_from_step = m.step();
    summary_.checkpoints.push_back(m.step());
  }
  if (last_checkpoint_step_ < 0) TryCheckpoint();  // the base every recovery can go back to
  last_checkpoint_time_ = ChiefNow();
  last_eval_step_ = MinStep();
  for (int i = 0; i < NumWorkers(); ++i) {
    absl::Status s = StartWorker(i, workers_[i].step);
    if (!s.ok()) report_(absl::StrCat("cannot start ", workers_[i].control->name(), " yet: ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  status_.set_state(JobStatusResponse::RUNNING);
  return absl::OkStatus();
}

absl::StatusOr<JobSummary> Coordinator::Run() {
  start_time_ = ChiefNow();
  summary_.job_name = options_.job.name();
  summary_.checkpoint_dir = manifests_.dir();
  absl::Status s = Setup();
  int64_t first_steps = 0;  // restored workers resume mid-run: count only this run's steps
  for (const WorkerView& w : workers_) first_steps += w.step;
  bool done = false;
  const int final_wait_ms = options_.job.failure().final_checkpoint_wait_ms();
  const absl::Duration final_wait = final_wait_ms < 0    ? absl::InfiniteDuration()
                                    : final_wait_ms == 0 ? absl::Minutes(10)
                                                         : absl::Milliseconds(final_wait_ms);
  absl::Time final_since = absl::InfiniteFuture();  // the first failed final checkpoint
  while (s.ok()) {
    while (s.ok() && !done) {
      registry_->WaitForChange(registry_->version(), options_.poll_interval);
      s = Watch(&done);
    }
    if (!s.ok()) break;
    Report(true);
    if (last_checkpoint_step_ == MinStep()) break;
    // The final checkpoint. If a PS failed at the very end, the watch loop
    // recovers (workers redo the steps since the last checkpoint) or waits.
    absl::Status c = Checkpoint();
    if (c.ok()) break;
    if (final_since == absl::InfiniteFuture()) final_since = ChiefNow();
    if (ChiefNow() - final_since >= final_wait) {
      s = absl::DataLossError(absl::StrCat(
          "training finished at step ", MinStep(), " but its final checkpoint could not be committed for ",
          absl::FormatDuration(final_wait), " (failure.final_checkpoint_wait_ms): ", c.message(),
          ". The last committed checkpoint is ",
          last_checkpoint_step_ < 0 ? std::string("none") : absl::StrCat("step ", last_checkpoint_step_),
          "; the PS keep the trained parameters and the workers wait: fix the snapshot store and restart "
          "the chief (it restores that checkpoint and trains the steps since again)"));
      break;
    }
    report_(absl::StrCat("final checkpoint failed, watching and trying again: ", c.message()));
    done = false;
    absl::SleepFor(Backoff(checkpoint_failures_++));
  }
  if (s.ok() && evaluator_) {
    absl::Status e = Evaluate(MinStep());
    if (!e.ok()) {
      report_(absl::StrCat("final evaluation failed: ", e.message()));
      // An earlier evaluation's figures are not the final ones.
      summary_.metrics.clear();
      summary_.final_evaluation_error = std::string(e.message());
    }
  }
  summary_.steps = MinStep();
  summary_.final_loss = Status().loss();
  summary_.wall_seconds = absl::ToDoubleSeconds(ChiefNow() - start_time_);
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
  if (!s.ok()) return s;
  // Only a finished job lets its tasks go; after a failure they wait,
  // parked, for the next chief.
  SaveJobState(false);
  for (WorkerView& w : workers_) {
    if (!w.left) (void)w.control->Shutdown();  // one that left is gone
  }
  return summary_;
}

WatchState Coordinator::CoreState() const {
  WatchState s;
  for (const PsView& p : ps_) s.ps.push_back(p);  // the records, not the clients
  s.ps_lost = ps_lost_;
  for (const WorkerView& w : workers_) s.workers.push_back(w);
  s.generation = generation_;
  s.end_step = end_step_;
  s.last_checkpoint_step = last_checkpoint_step_;
  s.last_checkpoint_time = last_checkpoint_time_;
  s.next_checkpoint_try = next_checkpoint_try_;
  s.last_eval_step = last_eval_step_;
  return s;
}

void Coordinator::AdoptCoreState(const WatchState& s) {
  // The core updates only the records; the rest is the shell's to change.
  for (int p = 0; p < NumPs() && p < static_cast<int>(s.ps.size()); ++p) static_cast<PsRecord&>(ps_[p]) = s.ps[p];
  for (int i = 0; i < NumWorkers() && i < static_cast<int>(s.workers.size()); ++i) {
    static_cast<WorkerRecord&>(workers_[i]) = s.workers[i];
  }
}

std::vector<std::optional<PsProbe>> Coordinator::ProbeStores() {
  std::vector<std::optional<PsProbe>> out(NumPs());
  std::vector<std::thread> calls;
  const absl::Duration timeout = PsProbeTimeout();
  for (int p = 0; p < NumPs(); ++p) {
    if (!StoreActive(p) || LostToFailover(p)) continue;  // a lost PS's stores moved
    calls.emplace_back([this, p, timeout, &out] {
      PsProbe probe;
      probe.asked = ChiefNow();
      absl::StatusOr<PsStatusResponse> st = ps_[p].admin->Status(timeout);
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
  std::vector<std::optional<WorkerProbe>> out(NumWorkers());
  ForEachWorker([&](int i) {
    if (workers_[i].left) return absl::OkStatus();  // gone for good; back only as a new process
    WorkerProbe probe;
    absl::StatusOr<WorkerStatusResponse> st = workers_[i].control->Status(absl::Seconds(2));
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
      report_(c.why);
      return absl::OkStatus();
    case WatchCommand::kStartWorker: {
      absl::Status s = StartWorker(c.index, c.step);
      if (s.code() == absl::StatusCode::kInvalidArgument) {
        // The worker refuses the assignment itself: asking again, many
        // times a second, would not change its answer.
        return absl::FailedPreconditionError(
            absl::StrCat(workers_[c.index].control->name(), " refuses its assignment: ", s.message()));
      }
      if (!s.ok()) report_(absl::StrCat("starting ", workers_[c.index].control->name(), ": ", s.message()));
      return absl::OkStatus();
    }
    case WatchCommand::kResumeWorker: {
      absl::Status s = workers_[c.index].control->Resume(c.step, generation_, Route());
      if (!s.ok()) report_(absl::StrCat("resuming ", workers_[c.index].control->name(), ": ", s.message()));
      return absl::OkStatus();
    }
    case WatchCommand::kFailover:
      return Failover(c.index, c.why);
    case WatchCommand::kRecover:
      return Recover(c.why, c.failure);
    case WatchCommand::kShrinkGroup:
      ShrinkGroup(c.index, c.down);
      return Recover(c.why);
    case WatchCommand::kChangeMembership:
      return ChangeMembership(c.why, c.joining);
    case WatchCommand::kRejoinGroup:
      return RejoinGroup(c.index);
    case WatchCommand::kFail:
      return absl::Status(c.code, c.why);
  }
  return absl::InternalError(absl::StrCat("unknown watch command ", static_cast<int>(c.kind)));
}

OptimizerDef Coordinator::StoreOptimizer() const {
  return ResolveSchedule(options_.job.optimizer(), end_step_ * (Sync() ? 1 : options_.cluster.NumTasks(kWorkerJob)));
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
  {
    absl::MutexLock lock(&mu_);
    status_.set_waiting_for(stores.waiting_for);
  }
  for (const WatchCommand& c : stores.commands) {
    RETURN_IF_ERROR(RunCommand(c));
    if (c.EndsPass()) return absl::OkStatus();
  }
  const bool all_ps_answer = stores.all_answer;

  // Membership: workers and PS that join or leave (their I/O is here).
  if (Elastic()) {
    ASSIGN_OR_RETURN(bool changed, WatchMembership());
    if (changed) return absl::OkStatus();
  }
  if (ElasticPs() && all_ps_answer) {
    ASSIGN_OR_RETURN(bool moved, WatchPsMembership());
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
  {
    absl::MutexLock lock(&mu_);
    status_.set_step(MinStep());
    status_.set_examples_per_sec(workers.examples_per_sec);
    // The mean of the losses and training metrics of the workers' last
    // pushed steps, and the (mean) step they are from: a worker that has
    // pushed nothing since it started has none to give.
    float loss = 0;
    int64_t loss_step = 0;
    int contributors = 0;
    std::map<std::string, float> train_metric;
    for (const WorkerView& w : workers_) {
      if (w.removed || w.loss_step < 0) continue;
      ++contributors;
      loss += w.loss;
      loss_step += w.loss_step;
      for (const auto& [name, value] : w.train_metric) train_metric[name] += value;
    }
    status_.set_loss(contributors > 0 ? loss / contributors : 0);
    status_.set_loss_step(contributors > 0 ? loss_step / contributors : -1);
    status_.clear_train_metric();
    for (const auto& [name, sum] : train_metric) (*status_.mutable_train_metric())[name] = sum / contributors;
    if (!lr_schedule_) {
      absl::StatusOr<std::unique_ptr<Optimizer>> o = Optimizer::Create(StoreOptimizer());
      if (o.ok()) lr_schedule_ = *std::move(o);
    }
    if (lr_schedule_) status_.set_learning_rate(lr_schedule_->LearningRate(std::max<int64_t>(1, stores_global_step_)));
    status_.set_last_checkpoint_step(last_checkpoint_step_);
    status_.set_failures_survived(summary_.failures_survived);
    status_.set_checkpoint_failures(checkpoint_failures_);
    status_.set_membership_changes(membership_changes_);
    status_.clear_member();
    for (int m : GroupMembers()) status_.add_member(workers_[m].control->name());
  }
  summary_.examples_per_sec_last_window = workers.examples_per_sec;
  Report(false);
  if (!workers.all_done && all_ps_answer) {  // a PS lost to a failover that is back: a backup again
    ASSIGN_OR_RETURN(bool rebuilt, MaybeRebuild());
    if (rebuilt) return absl::OkStatus();
  }
  const NextSteps next = core_.DecideNext(workers.all_done, all_ps_answer, ChiefNow(), CoreState());
  if (next.done) {
    *done = true;
    return absl::OkStatus();
  }
  if (next.checkpoint) TryCheckpoint();
  if (next.evaluate) {
    const int64_t step = MinStep();
    absl::Status e = Evaluate(step);
    if (!e.ok()) {
      report_(absl::StrCat("evaluation at step ", step, " failed (training goes on): ", e.message()));
      last_eval_step_ = step;
    }
  }
  return absl::OkStatus();
}

void Coordinator::Report(bool force) {
  absl::Time now = ChiefNow();
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
  // A worker's epoch is its batch's first example's; the last step of each
  // epoch also reads the next one's first examples, so by the end of an
  // epochs job a batch starts one pass beyond ("epoch 16" of 15): the
  // job's last epoch it still is.
  const int shown_epoch = options_.job.steps() <= 0 && options_.job.epochs() > 0
                              ? std::min(epoch + 1, options_.job.epochs())
                              : epoch + 1;
  if (options_.scalar) {
    // Each training scalar at the step its loss is from, once a step (a
    // report with no newer step writes none; after a restore the steps
    // go back and are written again).
    if (s.loss_step() >= 0 && s.loss_step() != last_scalar_step_) {
      last_scalar_step_ = s.loss_step();
      options_.scalar("loss", s.loss_step(), s.loss());
      for (const auto& [name, value] : s.train_metric()) options_.scalar("train/" + name, s.loss_step(), value);
      if (lr_schedule_) options_.scalar("learning_rate", s.loss_step(), s.learning_rate());
    }
    options_.scalar("examples_per_sec", step, static_cast<float>(s.examples_per_sec()));
  }
  report_(absl::StrFormat(
      "step %d/%d (%.1f%%) epoch %d loss %.4f examples/s %.0f eta %s checkpoint %d", step,
      end_step_, 100 * frac, shown_epoch, s.loss(), s.examples_per_sec(),
      FormatEta(per_step_s * (end_step_ - step)), last_checkpoint_step_));
}

}  // namespace psrt
