// The coordinator's checkpoint, recovery and evaluation steps.
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chief/coordinator.h"
#include "common/json_string.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"
#include "common/transport/ps_client.h"
#include "glog/logging.h"

namespace psrt {

absl::Status Coordinator::Checkpoint() {
  const absl::Time start = ChiefNow();
  // Phase one: quiesce, copy in memory on every PS, let training go on.
  std::vector<int64_t> steps(NumWorkers());
  auto active = [this](const WorkerView& w) {
    return !w.removed && w.reachable &&
           (w.state == WorkerStatusResponse::RUNNING || w.state == WorkerStatusResponse::PAUSED);
  };
  std::vector<absl::Status> pauses = ForEachWorker([&](int i) {
    WorkerView& w = workers_[i];
    if (!active(w)) return absl::OkStatus();
    absl::StatusOr<int64_t> s = w.control->Pause(generation_, absl::Seconds(5), {}, w.incarnation);
    if (s.ok()) w.step = *s;
    return s.status();
  });
  absl::Status paused;
  for (int i = 0; i < NumWorkers(); ++i) {
    steps[i] = workers_[i].step;
    // A member that does not answer may have pushed past its record: the
    // copy would not be the state of the steps the manifest names (found
    // by the simulation: a stopped SYNC worker's push completed its step).
    const WorkerView& w = workers_[i];
    if (!w.removed && !w.reachable && paused.ok() &&
        (w.state == WorkerStatusResponse::RUNNING || w.state == WorkerStatusResponse::PAUSED)) {
      paused = absl::UnavailableError(
          absl::StrCat(w.control->name(), " does not answer: the steps it pushed are not known"));
    }
    // A worker that may still push makes the copy inconsistent with the
    // steps the manifest would name.
    if (!pauses[i].ok() && paused.ok()) {
      paused = absl::UnavailableError(absl::StrCat("cannot pause ", workers_[i].control->name(), ": ",
                                                   pauses[i].message()));
    }
  }
  int64_t step = MinStep();
  // SYNC applies step t once every worker pushed it, so the PS state is that
  // of the slowest worker's step: all resume there.
  if (Sync()) {
    for (int i = 0; i < NumWorkers(); ++i) {
      if (!workers_[i].removed) steps[i] = step;
    }
  }
  int keep = options_.job.checkpoint().keep() > 0 ? options_.job.checkpoint().keep() : 3;
  const CheckpointPolicy& policy = options_.job.checkpoint();
  const int full_every = !policy.incremental() ? 0 : policy.full_every() > 0 ? policy.full_every() : 8;
  std::vector<SnapshotResponse> shards(NumPs());
  absl::Status copy_status = paused;
  SnapshotRequest req;
  req.set_step(step);
  req.set_keep(keep);
  req.set_full_every(full_every);
  // The PS keep what the chief's manifests still name (and this step), so
  // the independent full checkpoint the manifests keep is kept there too.
  for (int64_t s : manifests_.Retained(keep)) req.mutable_retain()->add_step(s);
  req.mutable_retain();  // set even when empty: the first checkpoint
  for (int p = 0; p < NumPs() && copy_status.ok(); ++p) {
    if (!StoreActive(p)) continue;
    SnapshotRequest mine = req;
    if (IsReplica(p)) {
      for (const std::string& v : replica_share_[p - NumPsTasks()]) mine.add_variable(v);
    }
    absl::StatusOr<SnapshotResponse> r = StoreAdmin(p)->Snapshot(mine, manifests_.dir());
    if (r.ok()) {
      shards[p] = *r;
    } else {
      copy_status = r.status();
    }
  }
  const absl::Duration pause = ChiefNow() - start;
  for (int i = 0; i < NumWorkers(); ++i) {
    WorkerView& w = workers_[i];
    if (active(w)) {
      w.step = steps[i];
      absl::Status s = w.control->Resume(w.step, generation_);
      if (!s.ok()) LOG(WARNING) << "resume after checkpoint: " << s;
    }
  }
  RETURN_IF_ERROR(copy_status);

  // Phase two: every copy durable, then the commit.
  RETURN_IF_ERROR(WaitDurable(step));
  if (options_.fault_kill_before_commit > 0 &&
      static_cast<int>(summary_.checkpoints.size()) + 1 == options_.fault_kill_before_commit) {
    report_(absl::StrCat("fault injection: killing the chief before committing step ", step));
    ::raise(SIGKILL);
  }
  CheckpointManifest m;
  m.set_step(step);
  m.set_commit_time_unix_ms(absl::ToUnixMillis(absl::Now()));  // wall clock: for people
  m.set_job_name(options_.job.name());
  m.set_failures_survived(summary_.failures_survived);
  for (int64_t s : steps) m.add_worker_step(s);
  if (Elastic()) {
    for (const auto& [worker, streams] : StreamsAt(workers_, steps)) {
      for (const StreamPos& p : streams) {
        CheckpointManifest::StreamPosition* sp = m.add_stream();
        sp->set_worker(worker);
        sp->set_stream(p.index);
        sp->set_batch(p.batch);
      }
    }
  }
  for (int p = 0; p < NumPs(); ++p) {
    if (!StoreActive(p)) continue;  // a removed member's replica: not in this checkpoint
    CheckpointManifest::Shard* sh = m.add_shard();
    sh->set_ps_task(p);
    sh->set_path(shards[p].path());
    sh->set_bytes(shards[p].bytes());
    sh->set_delta(shards[p].delta());
    sh->set_base_step(shards[p].base_step());
    if (!IsReplica(p)) {
      for (const VariableDef& v : VariablesOnStore(plan_.placement, p)) sh->add_variable(v.name());
    }
  }
  for (const VariablePlacement& vp : plan_.placement.variable()) {
    CheckpointManifest::Variable* v = m.add_variable();
    v->set_name(vp.variable().name());
    for (int64_t d : vp.variable().shape().dim()) v->add_shape(d);
  }
  RETURN_IF_ERROR(manifests_.Commit(m));
  manifests_.Prune(keep);
  last_checkpoint_step_ = step;
  last_checkpoint_time_ = ChiefNow();
  summary_.checkpoints.push_back(step);
  report_(absl::StrCat("checkpoint of step ", step, " committed (training paused ",
                       absl::FormatDuration(pause), ", total ",
                       absl::FormatDuration(ChiefNow() - start), ")"));
  return absl::OkStatus();
}

absl::Status Coordinator::WaitDurable(int64_t step) {
  absl::Time deadline = ChiefNow() + absl::Minutes(10);
  for (int p = 0; p < NumPs(); ++p) {
    if (!StoreActive(p)) continue;
    while (true) {
      ASSIGN_OR_RETURN(PsStatusResponse st, StoreAdmin(p)->Status());
      if (st.incarnation() != StoreIncarnation(p)) {
        return absl::UnavailableError(absl::StrCat(StoreAdmin(p)->name(), " restarted before step ", step,
                                                   " was durable"));
      }
      if (!st.error().empty()) {
        return absl::DataLossError(absl::StrCat(ps_[p].admin->name(), " snapshot of step ", step,
                                                " failed: ", st.error()));
      }
      if (std::find(st.durable_snapshots().begin(), st.durable_snapshots().end(), step) !=
          st.durable_snapshots().end()) {
        break;
      }
      if (ChiefNow() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(ps_[p].admin->name(), " did not make step ", step, " durable"));
      }
      registry_->WaitForChange(registry_->version(), absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

absl::Duration Coordinator::Backoff(int attempt) const {
  const FailurePolicy& f = options_.job.failure();
  absl::Duration first = absl::Milliseconds(f.retry_backoff_ms() > 0 ? f.retry_backoff_ms() : 1000);
  absl::Duration most = absl::Milliseconds(f.retry_backoff_max_ms() > 0 ? f.retry_backoff_max_ms() : 60000);
  absl::Duration d = first;
  for (int i = 0; i < attempt && d < most; ++i) d *= 2;
  return std::min(d, most);
}

void Coordinator::TryCheckpoint() {
  absl::Status s = Checkpoint();
  if (s.ok()) {
    if (checkpoint_failures_ > 0) {
      report_(absl::StrCat("checkpoints work again after ", checkpoint_failures_, " failed"));
    }
    checkpoint_failures_ = 0;
    next_checkpoint_try_ = absl::InfinitePast();
    absl::MutexLock lock(&mu_);
    status_.set_checkpoint_failures(0);
    status_.clear_checkpoint_error();
    return;
  }
  const absl::Duration wait = Backoff(checkpoint_failures_);
  ++checkpoint_failures_;
  next_checkpoint_try_ = ChiefNow() + wait;
  report_(absl::StrCat("WARNING: checkpoint abandoned (", checkpoint_failures_,
                       " failed in a row; training goes on, but progress since the checkpoint of step ",
                       last_checkpoint_step_, " is at risk): ", s.message(), "; next try in ",
                       absl::FormatDuration(wait)));
  if (options_.scalar) options_.scalar("checkpoint/failures_in_a_row", MinStep(), checkpoint_failures_);
  absl::MutexLock lock(&mu_);
  status_.set_checkpoint_failures(checkpoint_failures_);
  status_.set_checkpoint_error(std::string(s.message()));
}

absl::Status Coordinator::WaitForAllPs() {
  const int wait_ms = options_.job.failure().ps_wait_ms();
  const absl::Time start = ChiefNow();
  absl::Time said = start;
  for (int p = 0; p < NumPs(); ++p) {
    while (StoreActive(p)) {
      absl::StatusOr<PsStatusResponse> st = ps_[p].admin->Status(absl::Seconds(1));
      if (st.ok()) break;
      // A member's replica that stays away: the group goes on without it.
      if (MaybeShrinkGroup(p, ChiefNow() - std::min(start, ps_[p].down_since))) break;
      std::string what = absl::StrCat(ps_[p].admin->name(), " (not answering: ", st.status().message(), ")");
      if (wait_ms > 0 && ChiefNow() - start > absl::Milliseconds(wait_ms)) {
        return absl::UnavailableError(absl::StrCat(ps_[p].admin->name(), " did not come back within ps_wait_ms ",
                                                   wait_ms, ": ", st.status().message()));
      }
      if (ChiefNow() - said >= absl::Minutes(1)) {
        said = ChiefNow();
        report_(absl::StrCat("recovery waits for ", what, " since ",
                             absl::FormatDuration(absl::Trunc(ChiefNow() - start, absl::Seconds(1)))));
      }
      {
        absl::MutexLock lock(&mu_);
        status_.set_waiting_for(what);
      }
      registry_->WaitForChange(registry_->version(), absl::Milliseconds(50));
    }
  }
  absl::MutexLock lock(&mu_);
  status_.clear_waiting_for();
  return absl::OkStatus();
}

std::vector<absl::Status> Coordinator::ForEachWorker(const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> out(NumWorkers());
  std::vector<std::thread> calls;
  for (int i = 0; i < NumWorkers(); ++i) calls.emplace_back([&, i] { out[i] = fn(i); });
  for (std::thread& t : calls) t.join();
  return out;
}

void Coordinator::NewGeneration() {
  // One more than any handed out, recorded before any task sees it: a
  // chief that dies after using it and its successor (whose clock may be
  // anywhere) never hand out the same or a lower one.
  ++generation_;
  SaveJobState(true);
}

void Coordinator::LearnGenerationFloor(int64_t saved, int64_t saved_epoch) {
  int64_t floor = std::max(generation_, saved);
  for (int p = 0; p < NumPs(); ++p) {
    absl::StatusOr<PsStatusResponse> st = ps_[p].admin->Status(PsProbeTimeout());
    if (st.ok()) floor = std::max(floor, st->generation());
  }
  std::vector<int64_t> seen(NumWorkers(), 0);
  steps_at_takeover_.assign(NumWorkers(), 0);
  ForEachWorker([&](int i) {
    absl::StatusOr<WorkerStatusResponse> st = workers_[i].control->Status(absl::Seconds(2));
    if (st.ok()) {
      seen[i] = st->generation();
      steps_at_takeover_[i] = st->step();
    }
    return absl::OkStatus();
  });
  for (int64_t g : seen) floor = std::max(floor, g);
  generation_ = floor;
  if (Replicated()) {
    // Placement epochs likewise: from the job state and the PS.
    int64_t epoch = std::max(epoch_, saved_epoch);
    for (int p = 0; p < NumPsTasks(); ++p) {
      absl::StatusOr<PsStatusResponse> st = ps_[p].admin->Status(PsProbeTimeout());
      if (st.ok()) epoch = std::max(epoch, st->epoch());
    }
    epoch_ = epoch;
  }
  floor_learned_ = true;
}

void Coordinator::SaveJobState(bool running) {
  ChiefJobState state;
  state.set_failures_survived(summary_.failures_survived);
  state.set_running(running);
  state.set_generation(generation_);
  state.set_epoch(epoch_);
  absl::Status s = manifests_.WriteJobState(state);
  if (!s.ok()) LOG(WARNING) << "cannot save the job state: " << s;
}

void Coordinator::CountFailure() {
  ++summary_.failures_survived;
  SaveJobState(true);
}

absl::Status Coordinator::Recover(const std::string& why, bool failure) {
  const absl::Time start = ChiefNow();
  report_(absl::StrCat("recovering: ", why));
  {
    absl::MutexLock lock(&mu_);
    status_.set_state(JobStatusResponse::RECOVERING);
  }
  if (failure) CountFailure();
  // Workers known to be down are not waited on, and the others at once: the
  // generation fence keeps whatever a worker we could not pause still
  // pushes out of the restored parameters.
  ForEachWorker([this](int i) {
    WorkerView& w = workers_[i];
    if (!w.reachable || (w.state != WorkerStatusResponse::RUNNING && w.state != WorkerStatusResponse::PAUSED)) {
      return absl::OkStatus();
    }
    // A healthy worker pauses in milliseconds (its push in flight goes to a
    // dead PS and fails at once); one that does not is left to the fence.
    absl::StatusOr<int64_t> s = w.control->Pause(generation_, absl::Seconds(2), {}, w.incarnation);
    if (!s.ok()) {
      w.reachable = false;
      return s.status();
    }
    // Its own word on where it got: the record may lag a second of pushes,
    // which the restore takes back too (rolled_back_steps counts them).
    w.step = std::max(w.step, *s);
    return absl::OkStatus();
  });
  std::vector<int64_t> reached(NumWorkers());
  for (int i = 0; i < NumWorkers(); ++i) reached[i] = workers_[i].step;
  RETURN_IF_ERROR(RestoreOrStartFresh());
  int64_t rolled_back = 0;
  for (int i = 0; i < NumWorkers(); ++i) rolled_back += std::max<int64_t>(0, reached[i] - workers_[i].step);
  summary_.rolled_back_steps += rolled_back;
  std::vector<absl::Status> resumed = ForEachWorker([this](int i) {
    WorkerView& w = workers_[i];
    if (w.removed) return absl::OkStatus();  // not in the group it re-forms
    if (!w.reachable) return absl::UnavailableError(absl::StrCat(w.control->name(), " is down"));
    // A worker that had finished redoes the steps since the checkpoint; a
    // mirrored group is formed anew (its old one is broken, and a restarted
    // member listens on another port).
    // One whose streams the restore dealt anew is started with them.
    const bool redealt = std::find(redealt_.begin(), redealt_.end(), i) != redealt_.end();
    if (w.state == WorkerStatusResponse::DONE || Collective() || redealt) return w.control->Start(AssignmentFor(i, w.step));
    return w.control->Resume(w.step, generation_);
  });
  for (int i = 0; i < NumWorkers(); ++i) {
    WorkerView& w = workers_[i];
    if (w.removed) {
      // Not in the group: what it says of its steps when it comes back
      // predates the restore (ChangeMembership asks a holder for its step
      // only when its incarnation is known).
      if (!Collective()) w.incarnation = 0;
      continue;
    }
    if (resumed[i].ok()) {
      w.state = WorkerStatusResponse::RUNNING;
      // Started afresh: the incarnation it was started in is the one the
      // watch expects (a member restarted since is started again there).
      if (Collective()) w.incarnation = registry_->Get(MakeTaskId(kWorkerJob, i)).info.incarnation();
    } else {
      // Down or restarted: the watch loop starts it when it answers.
      LOG(WARNING) << "resume after recovery: " << resumed[i];
      w.incarnation = 0;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    status_.set_state(JobStatusResponse::RUNNING);
  }
  report_(absl::StrCat("recovered to the checkpoint of step ", last_checkpoint_step_, " in ",
                       absl::FormatDuration(ChiefNow() - start), "; failures survived: ",
                       summary_.failures_survived, "; rolled_back_steps=", rolled_back));
  return absl::OkStatus();
}

absl::Status Coordinator::RestoreOrStartFresh() {
  redealt_.clear();
  for (int attempt = 0;; ++attempt) {
    RETURN_IF_ERROR(WaitForAllPs());
    // A new generation before anything is restored: from the moment a PS
    // takes it, pushes of the old one are refused there.
    NewGeneration();
    absl::StatusOr<CheckpointManifest> m = RestoreNewest();
    if (m.ok()) {
      for (int i = 0; i < NumWorkers(); ++i) {
        workers_[i].step = StepAfterRestore(*m, i);
      }
      RestoreStreamsOf(*m);
      last_checkpoint_step_ = m->step();
      summary_.restored_from_step = m->step();
      summary_.checkpoints.push_back(m->step());
      summary_.failures_survived = std::max(summary_.failures_survived, m->failures_survived());
      report_(absl::StrCat("restored checkpoint of step ", m->step(), " from ", manifests_.PathFor(m->step()),
                           " (generation ", generation_, ")"));
      return absl::OkStatus();
    }
    if (m.status().code() == absl::StatusCode::kNotFound) return StartFresh();  // nothing to lose
    if (m.status().code() == absl::StatusCode::kFailedPrecondition) {
      if (options_.job.failure().on_no_checkpoint() == FailurePolicy::START_FRESH) {
        report_(absl::StrCat("WARNING: ", m.status().message(),
                             "; starting fresh on every PS (failure.on_no_checkpoint: START_FRESH)"));
        return StartFresh();
      }
      const std::string what = absl::StrCat(
          m.status().message(), "; refusing to train on a mix of restored and fresh parameters "
          "(failure.on_no_checkpoint: WAIT). Repair the snapshot stores, or restart the chief "
          "with --restore=never to start fresh");
      report_(absl::StrCat("WAITING FOR AN OPERATOR: ", what));
      absl::MutexLock lock(&mu_);
      status_.set_waiting_for(what);
    } else {
      report_(absl::StrCat("restore failed (try ", attempt + 1, "), trying again: ", m.status().message()));
    }
    absl::SleepFor(Backoff(attempt));
  }
}

void Coordinator::RestoreStreamsOf(const CheckpointManifest& m) {
  if (!Elastic()) return;
  std::map<int, std::vector<StreamPos>> saved;
  for (const CheckpointManifest::StreamPosition& p : m.stream()) {
    saved[p.worker()].push_back(StreamPos{p.stream(), p.batch()});
  }
  absl::StatusOr<std::vector<int>> changed = RestoreStreams(NumStreams(), saved, &workers_);
  if (!changed.ok()) {
    report_(absl::StrCat("WARNING: the checkpoint of step ", m.step(), " names data streams no worker can read (",
                         changed.status().message(), "): keeping the current deal"));
    return;
  }
  redealt_ = *changed;
}

absl::Status Coordinator::StartFresh() {
  for (WorkerView& w : workers_) w.step = 0;
  // Every stream from its first batch again, dealt among the members.
  RETURN_IF_ERROR(DealStreams());
  redealt_ = GroupMembers();
  for (int p = 0; p < NumPs(); ++p) {
    if (StoreActive(p)) RETURN_IF_ERROR(CreateVariablesOn(p, /*reinitialize=*/true));
  }
  last_checkpoint_step_ = -1;
  return absl::OkStatus();
}

absl::Status Coordinator::RestoreAll(const CheckpointManifest& m) {
  std::set<std::string> theirs, ours;
  for (const CheckpointManifest::Shard& shard : m.shard()) theirs.insert(shard.path());
  for (int p = 0; p < NumPs(); ++p) {
    if (StoreActive(p)) ours.insert(StoreName(p));
  }
  std::vector<std::string> all, replicas;
  for (const CheckpointManifest::Shard& shard : m.shard()) {
    all.push_back(shard.path());
    if (absl::StartsWith(shard.path(), "worker-")) replicas.push_back(shard.path());
  }
  // The same stores holding the same variables (after a PS joined or
  // left they may not): each reads its own snapshot.
  const bool same = theirs == ours && SamePlacement(m);
  if (theirs != ours) {
    report_(absl::StrCat("checkpoint of step ", m.step(), " was taken with another layout (",
                         absl::StrJoin(theirs, ", "), "): assembling every store's variables from it"));
  } else if (!same) {
    report_(absl::StrCat("checkpoint of step ", m.step(), " was taken with its variables on other PS (a PS "
                         "joined or left since): assembling every store's variables from it"));
  }
  for (int p = 0; p < NumPs(); ++p) {
    if (!StoreActive(p)) continue;
    // Same layout: a PS reads its own snapshot, a replica the replicas'
    // shares (each wrote 1/N). Another layout: every store reads them all.
    std::vector<std::string> sources;
    if (!same) sources = all;
    if (same && IsReplica(p)) sources = replicas;
    RETURN_IF_ERROR(StoreAdmin(p)->Restore(m.step(), manifests_.dir(), generation_, sources).status());
  }
  if (Replicated()) return RestoreBackups(m, theirs != ours ? all : std::vector<std::string>{});
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManifest> Coordinator::RestoreNewest() {
  for (int p = 0; p < NumPs(); ++p) {
    if (StoreActive(p)) RETURN_IF_ERROR(CreateVariablesOn(p, /*reinitialize=*/false, /*restoring=*/true));
  }
  std::vector<int64_t> steps = manifests_.Steps();
  if (steps.empty()) return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", manifests_.dir()));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    absl::StatusOr<CheckpointManifest> m = manifests_.Read(*it);
    if (!m.ok()) {
      report_(absl::StrCat("refused checkpoint: ", m.status().message()));
      continue;
    }
    absl::Status restored = RestoreAll(*m);
    if (restored.ok()) return m;
    if (restored.code() != absl::StatusCode::kDataLoss && restored.code() != absl::StatusCode::kNotFound) {
      return restored;
    }
    report_(absl::StrCat("refused checkpoint of step ", m->step(), ": ", restored.message()));
  }
  return absl::FailedPreconditionError(absl::StrCat("no committed checkpoint in ", manifests_.dir(),
                                                    " can be restored on every PS"));
}

absl::Status Coordinator::Evaluate(int64_t step) {
  // Every dense variable, whole: shards of a partitioned one are joined by rows.
  // Hash tables are read by rows as the test batches need them, from the
  // PS, without making rows for ids training never saw.
  std::map<std::string, Tensor> variables;
  PlacementMap tables;
  for (const VariablePlacement& vp : plan_.placement.variable()) {
    if (vp.variable().kind() == VariableDef::HASH_TABLE) {
      *tables.add_variable() = vp;
      continue;
    }
    std::vector<Tensor> parts;
    for (const VariablePlacement::Shard& shard : vp.shard()) {
      // A replica's variables from the first member (all hold the same).
      const int store = IsReplica(shard.ps_task()) ? NumPsTasks() + GroupMembers().front() : shard.ps_task();
      ASSIGN_OR_RETURN(auto pulled, StoreAdmin(store)->Pull({vp.variable().name()}, generation_));
      if (pulled.size() != 1) {
        return absl::InternalError(absl::StrCat(StoreAdmin(store)->name(), " returned ",
                                                pulled.size(), " tensors for ", vp.variable().name()));
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
    for (int p = 0; p < NumPsTasks(); ++p) {
      ASSIGN_OR_RETURN(std::string a, options_.cluster.AddressOf(MakeTaskId(kPsJob, p)));
      addresses.push_back(a);
    }
    PsClientOptions o;
    o.worker = -1;  // the chief: never waits for a SYNC step
    o.read_only_rows = true;
    rows_client = std::make_unique<PsClient>(tables, addresses, channels_, o);
    rows_client->SetGeneration(generation_);
    if (Replicated()) rows_client->SetRoute(Route());
    read_rows = [&rows_client, step](const std::string& table, const Tensor& ids) -> absl::StatusOr<Tensor> {
      ASSIGN_OR_RETURN(TensorMap rows, rows_client->PullRows({{table, ids}}, step));
      auto it = rows.find(table);
      if (it == rows.end()) return absl::InternalError(absl::StrCat("no rows of ", table, " came back"));
      return it->second;
    };
  }
  ASSIGN_OR_RETURN(auto metrics, evaluator_(variables, read_rows));
  summary_.metrics = metrics;
  last_eval_step_ = step;
  {
    absl::MutexLock lock(&mu_);
    status_.set_eval_step(step);
    status_.clear_eval_metric();
    for (const auto& [k, v] : metrics) {
      if (k != "examples") (*status_.mutable_eval_metric())[k] = v;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [k, v] : metrics) {
    parts.push_back(absl::StrCat(k, " ", v));
    if (options_.scalar && k != "examples") options_.scalar("eval/" + k, step, v);
  }
  report_(absl::StrCat("eval at step ", step, ": ", absl::StrJoin(parts, ", ")));
  return absl::OkStatus();
}

std::string JobSummary::ToJson() const {
  std::vector<std::string> m;
  for (const auto& [k, v] : metrics) m.push_back(absl::StrCat("\"", k, "\": ", v));
  return absl::StrCat(
      "{\n  \"job\": \"", job_name, "\",\n  \"metrics\": {", absl::StrJoin(m, ", "),
      "},\n  \"final_loss\": ", final_loss, ",\n  \"steps\": ", steps, ",\n  \"total_steps\": ",
      total_steps, ",\n  \"restored_from_step\": ", restored_from_step,
      ",\n  \"wall_seconds\": ", wall_seconds, ",\n  \"examples_per_sec\": ", examples_per_sec,
      ",\n  \"examples_per_sec_last_window\": ", examples_per_sec_last_window,
      ",\n  \"checkpoints\": [", absl::StrJoin(checkpoints, ", "), "],\n  \"checkpoint_dir\": \"",
      checkpoint_dir, "\",\n  \"failures_survived\": ", failures_survived, ",\n  \"failovers\": ", failovers,
      ",\n  \"rolled_back_steps\": ", rolled_back_steps, ",\n  \"rebuilds\": ", rebuilds,
      final_evaluation_error.empty() ? ""
                                     : absl::StrCat(",\n  \"final_evaluation_error\": ", JsonString(final_evaluation_error)),
      "\n}\n");
}

}  // namespace psrt
