#include "chief/chief_cluster.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/compute/gradient_clipping.h"
#include "common/input/streams.h"
#include "common/optimizer.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {
namespace {

std::string CheckpointDir(const CoordinatorOptions& o) {
  if (!o.checkpoint_dir.empty()) return o.checkpoint_dir;
  if (!o.job.checkpoint().dir().empty()) return o.job.checkpoint().dir();
  return "/tmp/psrt-checkpoints";
}

std::string ElasticPsRefusalOf(const TrainingJob& job) {
  if (IsCollective(job)) return "PS join and leave only under the parameter-server strategy";
  if (ReplicationFactor(job) == 2) return "PS join and leave are not built with job.replication.factor 2";
  if (job.consistency().mode() != ConsistencyDef::ASYNC) {
    return "PS join and leave need ASYNC consistency (a new PS has no SYNC step counters)";
  }
  return "";
}

}  // namespace

JobShape::JobShape(const TrainingJob& job, const ClusterSpec& cluster)
    : collective(IsCollective(job)),
      sync(collective || job.consistency().mode() == ConsistencyDef::SYNC),
      replicated(ReplicationFactor(job) == 2),
      elastic(!collective),
      elastic_ps_refusal(ElasticPsRefusalOf(job)),
      num_ps_tasks(cluster.NumTasks(kPsJob)),
      num_streams(std::max(job.failure().max_workers(), cluster.NumTasks(kWorkerJob))),
      failover_after(
          absl::Milliseconds(job.replication().failover_after_ms() > 0 ? job.replication().failover_after_ms() : 500)),
      ps_probe_timeout(replicated ? failover_after : absl::Seconds(2)) {
  elastic_ps = job.failure().max_ps() > 0 && elastic_ps_refusal.empty();
}

ChiefCluster::ChiefCluster(CoordinatorOptions options_in, TaskRegistry* registry_in, ChannelCache* channels_in)
    : options(std::move(options_in)),
      registry(registry_in),
      channels(channels_in),
      shape(options.job, options.cluster),
      report(options.report ? options.report : [](const std::string& line) { LOG(INFO) << line; }),
      manifests(CheckpointDir(options)) {
  // The parameter stores: the PS tasks, then under a collective strategy
  // each worker's replica (served on the worker's own port). Checkpoints
  // and recoveries treat them alike.
  for (int i = 0; i < shape.num_ps_tasks; ++i) {
    TaskId t = MakeTaskId(kPsJob, i);
    PsView v;
    v.name = TaskName(t);
    v.admin = std::make_unique<PsAdmin>(channels->Get(*options.cluster.AddressOf(t)), v.name);
    ps.push_back(std::move(v));
  }
  for (int i = 0; shape.collective && i < options.cluster.NumTasks(kWorkerJob); ++i) {
    TaskId t = MakeTaskId(kWorkerJob, i);
    PsView v;
    v.name = TaskName(t) + " (replica)";
    v.admin = std::make_unique<PsAdmin>(channels->Get(*options.cluster.AddressOf(t)), v.name);
    ps.push_back(std::move(v));
  }
  for (int i = 0; i < options.cluster.NumTasks(kWorkerJob); ++i) {
    TaskId t = MakeTaskId(kWorkerJob, i);
    WorkerView v;
    v.name = TaskName(t);
    v.control = std::make_unique<WorkerControl>(channels->Get(*options.cluster.AddressOf(t)), v.name);
    workers.push_back(std::move(v));
  }
}

JobStatusResponse ChiefCluster::Status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

std::unique_ptr<PsAdmin> ChiefCluster::CopyAdmin(int ps, int store) const {
  auto a = std::make_unique<PsAdmin>(channels->Get(*options.cluster.AddressOf(MakeTaskId(kPsJob, ps))),
                                     absl::StrCat("ps:", ps));
  a->SetReplica(store, roles.epoch);
  return a;
}

void ChiefCluster::EditStatus(const std::function<void(JobStatusResponse*)>& edit) {
  absl::MutexLock lock(&mu_);
  edit(&status_);
}

int ChiefCluster::ActiveWorkers() const {
  int n = 0;
  for (const WorkerView& w : workers) n += w.removed ? 0 : 1;
  return std::max(n, 1);
}

WorkerAssignment ChiefCluster::AssignmentFor(int i, int64_t step) const {
  WorkerAssignment a;
  *a.mutable_graph() = plan.graph;
  *a.mutable_placement() = plan.placement;
  *a.mutable_input() = options.job.input();
  *a.mutable_consistency() = options.job.consistency();
  a.set_shard_index(i);
  a.set_num_shards(NumWorkers());
  const WorkerView& w = workers[i];
  if (shape.elastic && !w.streams.empty()) {
    // Its streams where `step` finds them, the one `step` reads first.
    std::vector<StreamPos> at = PositionsAt(w.streams, w.stream_base, step);
    const int64_t m = static_cast<int64_t>(at.size());
    std::rotate(at.begin(), at.begin() + (((step - w.stream_base) % m) + m) % m, at.end());
    a.set_num_shards(shape.num_streams);
    a.set_shard_index(at[0].index);
    for (const StreamPos& p : at) {
      DataStream* d = a.add_stream();
      d->set_index(p.index);
      d->set_start_batch(p.batch);
    }
  }
  a.set_start_step(step);
  // One already past an early end (it ran on unreached) runs nothing.
  a.set_end_step(std::max(end_step, step));
  a.set_loss_node(plan.loss_node);
  for (const auto& [var, node] : plan.gradient_node) (*a.mutable_gradient_node())[var] = node;
  for (const auto& m : plan.metric_nodes) a.add_metric_node(m);
  a.set_seed(options.job.seed());
  *a.mutable_clip() = ClippingOf(options.job.optimizer());
  a.set_chief_incarnation(options.incarnation);
  if (shape.replicated) *a.mutable_route() = Route();
  a.set_generation(generation);
  for (const TaskState& t : registry->All()) {
    if (t.info.task().job() == kPsJob) *a.add_ps() = t.info;
  }
  if (shape.collective) {
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
      g->add_peer(registry->Get(MakeTaskId(kWorkerJob, w)).info.collective_address());
    }
    g->set_group_id(static_cast<uint64_t>(generation));
    g->set_timeout_ms(CollectiveTimeoutMs(options.job));
    a.set_local_devices(LocalDevices(options.job));
  }
  return a;
}

absl::Status ChiefCluster::CreateVariablesOn(int store, bool reinitialize, bool restoring) {
  CreateVariablesRequest req;
  // Store index num_ps_tasks in the plan is "the worker's replica": every
  // replica holds what is placed there.
  for (VariableDef& v : VariablesOnStore(plan.placement, shape.IsReplica(store) ? shape.num_ps_tasks : store)) {
    *req.add_variable() = std::move(v);
  }
  // A schedule over "the whole job" in updates of a variable: every
  // worker's pushes in ASYNC, one a step in SYNC (all workers of the spec,
  // so the definition stays the same when a SYNC group shrinks).
  *req.mutable_optimizer() = StoreOptimizer();
  *req.mutable_consistency() = options.job.consistency();
  req.set_num_workers(ActiveWorkers());
  if (shape.IsReplica(store)) {
    // A replica has one writer, its worker, which applies each step's
    // all-reduced mean at once.
    req.mutable_consistency()->set_mode(ConsistencyDef::ASYNC);
    req.set_num_workers(1);
  } else if (shape.collective) {
    // Hybrid's PS: every worker's rows of every step, applied as they come.
    req.mutable_consistency()->set_mode(ConsistencyDef::ASYNC);
    *req.mutable_optimizer() =
        ResolveSchedule(options.job.optimizer(), job_steps * options.cluster.NumTasks(kWorkerJob));
  } else {
    // Who trains, by task index (after joins and leaves not 0..N-1), and
    // where each starts: BOUNDED_STALENESS waits for these workers only.
    // A fresh start has no steps to give (every counter goes back to 0).
    for (int i = 0; i < NumWorkers(); ++i) {
      if (workers[i].removed) continue;
      req.add_active_workers(i);
      if (!reinitialize) req.add_active_worker_steps(workers[i].step);
    }
  }
  req.set_chief_incarnation(options.incarnation);
  req.set_generation(generation);
  req.set_reinitialize(reinitialize);
  if (shape.replicated) return ConfigureStore(store, std::move(req));
  // The incarnation that created them still registered: a reconfiguration
  // (a stopped PS then holds a membership change up 5 s, not 30).
  const bool reconfigure = !reinitialize && ps[store].incarnation != 0 &&
                           registry->Get(MakeTaskId(kPsJob, store)).info.incarnation() == ps[store].incarnation;
  ASSIGN_OR_RETURN(CreateVariablesResponse resp, ps[store].admin->CreateVariables(req, reconfigure));
  if (!reinitialize && !restoring && ps[store].incarnation != 0 && resp.incarnation() != ps[store].incarnation) {
    // A PS restarted since: what it held is gone, and the variables just
    // created there hold their initial values. Taking its incarnation here
    // would hide that from the watch (seen: a membership change adopted a
    // restarted ps:0 and training went on from fresh values with no
    // restore); the watch restores it.
    return absl::UnavailableError(absl::StrCat(ps[store].admin->name(), " restarted (incarnation ", resp.incarnation(),
                                               ", not ", ps[store].incarnation,
                                               "): its state is gone; it is restored from the checkpoint"));
  }
  ps[store].incarnation = resp.incarnation();
  return absl::OkStatus();
}

absl::Status ChiefCluster::StartWorker(int i, int64_t step) {
  RETURN_IF_ERROR(workers[i].control->Start(AssignmentFor(i, step)));
  workers[i].step = step;
  workers[i].state = WorkerStatusResponse::RUNNING;
  workers[i].incarnation = registry->Get(MakeTaskId(kWorkerJob, i)).info.incarnation();
  workers[i].reachable = true;  // it answered
  return absl::OkStatus();
}

OptimizerDef ChiefCluster::StoreOptimizer() const {
  // The whole job's length, not end_step: a run that ends early keeps the
  // schedule it trained under.
  return ResolveSchedule(options.job.optimizer(), job_steps * (shape.sync ? 1 : options.cluster.NumTasks(kWorkerJob)));
}

absl::Duration ChiefCluster::Backoff(int attempt) const {
  const FailurePolicy& f = options.job.failure();
  absl::Duration first = absl::Milliseconds(f.retry_backoff_ms() > 0 ? f.retry_backoff_ms() : 1000);
  absl::Duration most = absl::Milliseconds(f.retry_backoff_max_ms() > 0 ? f.retry_backoff_max_ms() : 60000);
  absl::Duration d = first;
  for (int i = 0; i < attempt && d < most; ++i) d *= 2;
  return std::min(d, most);
}

std::vector<absl::Status> ChiefCluster::ForEachWorker(const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> out(NumWorkers());
  std::vector<std::thread> calls;
  for (int i = 0; i < NumWorkers(); ++i) calls.emplace_back([&, i] { out[i] = fn(i); });
  for (std::thread& t : calls) t.join();
  return out;
}

void ChiefCluster::NewGeneration() {
  // One more than any handed out, recorded before any task sees it: a
  // chief that dies after using it and its successor (whose clock may be
  // anywhere) never hand out the same or a lower one.
  ++generation;
  SaveJobState(true);
}

void ChiefCluster::LearnGenerationFloor(int64_t saved, int64_t saved_epoch) {
  int64_t floor = std::max(generation, saved);
  for (int p = 0; p < NumPs(); ++p) {
    absl::StatusOr<PsStatusResponse> st = ps[p].admin->Status(shape.ps_probe_timeout);
    if (st.ok()) floor = std::max(floor, st->generation());
  }
  std::vector<int64_t> seen(NumWorkers(), 0);
  steps_at_takeover.assign(NumWorkers(), 0);
  ForEachWorker([&](int i) {
    absl::StatusOr<WorkerStatusResponse> st = workers[i].control->Status(absl::Seconds(2));
    if (st.ok()) {
      seen[i] = st->generation();
      steps_at_takeover[i] = st->step();
    }
    return absl::OkStatus();
  });
  for (int64_t g : seen) floor = std::max(floor, g);
  generation = floor;
  if (shape.replicated) {
    // Placement epochs likewise: from the job state and the PS.
    int64_t epoch = std::max(roles.epoch, saved_epoch);
    for (int p = 0; p < shape.num_ps_tasks; ++p) {
      absl::StatusOr<PsStatusResponse> st = ps[p].admin->Status(shape.ps_probe_timeout);
      if (st.ok()) epoch = std::max(epoch, st->epoch());
    }
    roles.epoch = epoch;
  }
  floor_learned_ = true;
}

void ChiefCluster::SaveJobState(bool running) {
  ChiefJobState state;
  state.set_failures_survived(summary.failures_survived);
  state.set_rolled_back_steps(summary.rolled_back_steps);
  state.set_running(running);
  state.set_generation(generation);
  state.set_epoch(roles.epoch);
  if (stopped_early_at_step >= 0) state.set_stopped_early_at_step(stopped_early_at_step);
  absl::Status s = manifests.WriteJobState(state);
  if (!s.ok()) LOG(WARNING) << "cannot save the job state: " << s;
}

void ChiefCluster::CountFailure() {
  ++summary.failures_survived;
  SaveJobState(true);
}

void ChiefCluster::InitReplicas() {
  const int n = shape.num_ps_tasks;
  roles.primary_of.assign(n, 0);
  roles.backup_of.assign(n, -1);
  roles.lost.assign(n, false);
  roles.admins.clear();
  for (int s = 0; s < n; ++s) {
    roles.primary_of[s] = s;
    roles.backup_of[s] = (s + 1) % n;  // as AssignBackups placed them
    roles.admins.push_back(std::make_unique<PsAdmin>(channels->Get(*options.cluster.AddressOf(MakeTaskId(kPsJob, s))),
                                                     absl::StrCat("ps:", s)));
  }
  NewEpoch();
}

void ChiefCluster::NewEpoch() {
  // Above any epoch a chief before this one gave (a PS refuses older ones):
  // one more than the job state's and the PS's (LearnGenerationFloor),
  // recorded before any PS sees it. Never from the clock: a chief
  // restarted with its clock behind would hand out epochs the PS refuse.
  ++roles.epoch;
  if (floor_learned_) SaveJobState(true);
  for (int s = 0; s < static_cast<int>(roles.admins.size()); ++s) roles.admins[s]->SetReplica(s, roles.epoch);
  PublishReplicas();
}

void ChiefCluster::PublishReplicas() {
  absl::MutexLock lock(&mu_);
  status_.clear_replica();
  for (int s = 0; s < static_cast<int>(roles.primary_of.size()); ++s) {
    JobStatusResponse::Replica* r = status_.add_replica();
    r->set_store(s);
    r->set_primary(absl::StrCat("ps:", roles.primary_of[s]));
    if (roles.backup_of[s] >= 0) r->set_backup(absl::StrCat("ps:", roles.backup_of[s]));
    r->set_epoch(roles.epoch);
    r->set_state(roles.backup_of[s] >= 0 ? JobStatusResponse::Replica::REPLICATED
                                         : JobStatusResponse::Replica::UNREPLICATED);
  }
  status_.set_failovers(summary.failovers);
  status_.set_rebuilds(summary.rebuilds);
}

ReplicaRoute ChiefCluster::Route() const {
  ReplicaRoute r;
  if (!shape.replicated) return r;
  r.set_epoch(roles.epoch);
  for (int t : roles.primary_of) r.add_store_task(t);
  return r;
}

PsAdmin* ChiefCluster::StoreAdmin(int store) const {
  if (!shape.replicated || store >= static_cast<int>(roles.admins.size())) return ps[store].admin.get();
  return roles.admins[store].get();
}

uint64_t ChiefCluster::StoreIncarnation(int store) const {
  if (!shape.replicated || store >= static_cast<int>(roles.primary_of.size())) return ps[store].incarnation;
  return ps[roles.primary_of[store]].incarnation;
}

std::vector<std::optional<PsProbe>> ChiefCluster::StoreStatuses() const {
  std::vector<std::optional<PsProbe>> out(NumPs());
  for (int p = 0; p < NumPs(); ++p) {
    if (!StoreActive(p) || LostToFailover(p)) continue;
    PsProbe probe;
    probe.asked = ChiefNow();
    absl::StatusOr<PsStatusResponse> st = ps[p].admin->Status(shape.ps_probe_timeout);
    if (st.ok()) {
      probe.answer = *std::move(st);
    } else {
      probe.error = st.status();
    }
    out[p] = std::move(probe);
  }
  return out;
}

WatchState ChiefCluster::StoresView() const {
  WatchState s;
  for (const PsView& p : ps) s.ps.push_back(p);
  s.generation = generation;
  s.end_step = end_step;
  return s;
}

absl::Status ChiefCluster::ConfigureStore(int store, CreateVariablesRequest req) {
  const int primary = roles.primary_of[store], backup = roles.backup_of[store];
  ReplicaConfig* rc = req.mutable_replica();
  rc->set_store(store);
  rc->set_epoch(roles.epoch);
  // The backup first: the primary forwards to it from its first push.
  if (backup >= 0) {
    rc->set_backup(true);
    ASSIGN_OR_RETURN(CreateVariablesResponse b, ps[backup].admin->CreateVariables(req));
    ps[backup].incarnation = b.incarnation();
    rc->set_backup(false);
    rc->set_backup_task(backup);
    rc->set_backup_address(*options.cluster.AddressOf(MakeTaskId(kPsJob, backup)));
  }
  ASSIGN_OR_RETURN(CreateVariablesResponse p, ps[primary].admin->CreateVariables(req));
  ps[primary].incarnation = p.incarnation();
  // Store admins follow the primary.
  roles.admins[store] = std::make_unique<PsAdmin>(
      channels->Get(*options.cluster.AddressOf(MakeTaskId(kPsJob, primary))), absl::StrCat("ps:", primary));
  roles.admins[store]->SetReplica(store, roles.epoch);
  return absl::OkStatus();
}

std::vector<bool> ChiefCluster::PauseWorkers(const std::vector<int>& abandon, bool mark_unreachable) {
  std::vector<bool> paused(NumWorkers(), false);
  ForEachWorker([&](int i) {
    WorkerView& w = workers[i];
    // A membership change (mark_unreachable) asks the unreachable too: one
    // back since the last pass may have pushed past its record, and its
    // word is the only exact one (found by the simulation, seed 350617).
    // Not one a restore could not reach (incarnation 0): its word predates
    // the restore (seed 1142).
    if ((!w.reachable && (!mark_unreachable || w.incarnation == 0)) || w.removed ||
        (w.state != WorkerStatusResponse::RUNNING && w.state != WorkerStatusResponse::PAUSED)) {
      return absl::OkStatus();
    }
    absl::StatusOr<int64_t> s = w.control->Pause(generation, absl::Seconds(2), abandon, w.incarnation);
    if (s.ok()) {
      w.step = *s;
      w.reachable = true;
      paused[i] = true;
    } else if (mark_unreachable) {
      w.reachable = false;
    }
    return s.status();
  });
  return paused;
}

void ChiefCluster::ResumeWorkers(const std::vector<bool>& paused, const std::string& after) {
  const ReplicaRoute route = Route();
  ForEachWorker([&](int i) {
    if (!paused[i]) return absl::OkStatus();
    WorkerView& w = workers[i];
    absl::Status s = w.control->Resume(w.step, generation, route, ResumeEndStep(w.step));
    if (!s.ok()) report(absl::StrCat("resuming ", w.control->name(), " after ", after, ": ", s.message()));
    return s;
  });
}

absl::Status ChiefCluster::DealStreams() {
  if (!shape.elastic) return absl::OkStatus();
  // With no member the leavers keep theirs, from batch 0, until one joins.
  if (GroupMembers().empty()) {
    for (WorkerView& w : workers) {
      for (StreamPos& p : w.streams) p.batch = 0;
      w.stream_base = 0;
    }
    return absl::OkStatus();
  }
  std::map<int, std::vector<StreamPos>> dealt;
  RETURN_IF_ERROR(Deal(shape.num_streams, GroupMembers(), {}, &dealt));
  for (WorkerView& w : workers) {
    w.streams.clear();
    w.stream_base = 0;
  }
  for (auto& [i, streams] : dealt) {
    workers[i].streams = streams;
    workers[i].stream_base = 0;
  }
  return absl::OkStatus();
}

}  // namespace psrt
