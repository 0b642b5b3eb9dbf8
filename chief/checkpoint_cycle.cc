#include "chief/checkpoint_cycle.h"

#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan/placement.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

absl::Status CheckpointCycle::Checkpoint() {
  const absl::Time start = ChiefNow();
  // Phase one: quiesce, copy in memory on every PS, let training go on.
  std::vector<int64_t> steps(cluster_.NumWorkers());
  auto active = [this](const WorkerView& w) {
    return !w.removed && w.reachable &&
           (w.state == WorkerStatusResponse::RUNNING || w.state == WorkerStatusResponse::PAUSED);
  };
  std::vector<absl::Status> pauses = cluster_.ForEachWorker([&](int i) {
    WorkerView& w = cluster_.workers[i];
    if (!active(w)) return absl::OkStatus();
    absl::StatusOr<int64_t> s = w.control->Pause(cluster_.generation, absl::Seconds(5), {}, w.incarnation);
    if (s.ok()) w.step = *s;
    return s.status();
  });
  absl::Status paused;
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    steps[i] = cluster_.workers[i].step;
    // A member that does not answer may have pushed past its record: the
    // copy would not be the state of the steps the manifest names (found
    // by the simulation: a stopped SYNC worker's push completed its step).
    const WorkerView& w = cluster_.workers[i];
    if (!w.removed && !w.reachable && paused.ok() &&
        (w.state == WorkerStatusResponse::RUNNING || w.state == WorkerStatusResponse::PAUSED)) {
      paused = absl::UnavailableError(
          absl::StrCat(w.control->name(), " does not answer: the steps it pushed are not known"));
    }
    // A worker that may still push makes the copy inconsistent with the
    // steps the manifest would name.
    if (!pauses[i].ok() && paused.ok()) {
      paused = absl::UnavailableError(
          absl::StrCat("cannot pause ", cluster_.workers[i].control->name(), ": ", pauses[i].message()));
    }
  }
  if (!cluster_.shape.sync && paused.ok()) {
    // ASYNC: a worker killed between two PS's pushes of a step left one PS
    // ahead; its step is pushed again (a duplicate where it landed) when
    // the worker or the stream's next holder goes on. Copied before, the
    // restored PS would forget it holds the batch and take it twice.
    std::string differ;
    if (!StoresAgreeOnStreams(cluster_.StoreStatuses(), &differ)) {
      paused = absl::UnavailableError(absl::StrCat("the PS have not applied the same batches yet: ", differ));
    }
  }
  int64_t step = cluster_.MinStep();
  // SYNC applies step t once every worker pushed it, so the PS state is that
  // of the slowest worker's step: all resume there.
  if (cluster_.shape.sync) {
    for (int i = 0; i < cluster_.NumWorkers(); ++i) {
      if (!cluster_.workers[i].removed) steps[i] = step;
    }
  }
  int keep = cluster_.options.job.checkpoint().keep() > 0 ? cluster_.options.job.checkpoint().keep() : 3;
  const CheckpointPolicy& policy = cluster_.options.job.checkpoint();
  const int full_every = !policy.incremental() ? 0 : policy.full_every() > 0 ? policy.full_every() : 8;
  std::vector<SnapshotResponse> shards(cluster_.NumPs());
  absl::Status copy_status = paused;
  SnapshotRequest req;
  req.set_step(step);
  req.set_keep(keep);
  req.set_full_every(full_every);
  // The PS keep what the chief's manifests still name (and this step), so
  // the independent full checkpoint the manifests keep is kept there too.
  for (int64_t s : cluster_.manifests.Retained(keep)) req.mutable_retain()->add_step(s);
  req.mutable_retain();  // set even when empty: the first checkpoint
  for (int p = 0; p < cluster_.NumPs() && copy_status.ok(); ++p) {
    if (!cluster_.StoreActive(p)) continue;
    SnapshotRequest mine = req;
    if (cluster_.shape.IsReplica(p)) {
      for (const std::string& v : cluster_.replica_share[p - cluster_.shape.num_ps_tasks]) mine.add_variable(v);
    }
    absl::StatusOr<SnapshotResponse> r = cluster_.StoreAdmin(p)->Snapshot(mine, cluster_.manifests.dir());
    if (r.ok()) {
      shards[p] = *r;
    } else {
      copy_status = r.status();
    }
  }
  const absl::Duration pause = ChiefNow() - start;
  for (int i = 0; i < cluster_.NumWorkers(); ++i) {
    WorkerView& w = cluster_.workers[i];
    if (active(w)) {
      w.step = steps[i];
      absl::Status s = w.control->Resume(w.step, cluster_.generation, ReplicaRoute(), cluster_.ResumeEndStep(w.step));
      if (!s.ok()) LOG(WARNING) << "resume after checkpoint: " << s;
    }
  }
  RETURN_IF_ERROR(copy_status);

  // Phase two: every copy durable, then the commit.
  RETURN_IF_ERROR(WaitDurable(step));
  if (cluster_.options.fault_kill_before_commit > 0 &&
      static_cast<int>(cluster_.summary.checkpoints.size()) + 1 == cluster_.options.fault_kill_before_commit) {
    cluster_.report(absl::StrCat("fault injection: killing the chief before committing step ", step));
    ::raise(SIGKILL);
  }
  CheckpointManifest m;
  m.set_step(step);
  m.set_commit_time_unix_ms(absl::ToUnixMillis(absl::Now()));  // wall clock: for people
  m.set_job_name(cluster_.options.job.name());
  m.set_failures_survived(cluster_.summary.failures_survived);
  *m.mutable_job() = cluster_.options.job;
  for (int64_t s : steps) m.add_worker_step(s);
  if (cluster_.shape.elastic) {
    for (const auto& [worker, streams] : StreamsAt(cluster_.workers, steps)) {
      for (const StreamPos& p : streams) {
        CheckpointManifest::StreamPosition* sp = m.add_stream();
        sp->set_worker(worker);
        sp->set_stream(p.index);
        sp->set_batch(p.batch);
      }
    }
  }
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (!cluster_.StoreActive(p)) continue;  // a removed member's replica: not in this checkpoint
    CheckpointManifest::Shard* sh = m.add_shard();
    sh->set_ps_task(p);
    sh->set_path(shards[p].path());
    sh->set_bytes(shards[p].bytes());
    sh->set_delta(shards[p].delta());
    sh->set_base_step(shards[p].base_step());
    if (!cluster_.shape.IsReplica(p)) {
      for (const VariableDef& v : VariablesOnStore(cluster_.plan.placement, p)) sh->add_variable(v.name());
    }
  }
  for (const VariablePlacement& vp : cluster_.plan.placement.variable()) {
    CheckpointManifest::Variable* v = m.add_variable();
    v->set_name(vp.variable().name());
    for (int64_t d : vp.variable().shape().dim()) v->add_shape(d);
  }
  RETURN_IF_ERROR(cluster_.manifests.Commit(m));
  cluster_.manifests.Prune(keep);
  cluster_.last_checkpoint_step = step;
  cluster_.last_checkpoint_time = ChiefNow();
  cluster_.summary.checkpoints.push_back(step);
  cluster_.report(absl::StrCat("checkpoint of step ", step, " committed (training paused ", absl::FormatDuration(pause),
                               ", total ", absl::FormatDuration(ChiefNow() - start), ")"));
  return absl::OkStatus();
}

absl::Status CheckpointCycle::WaitDurable(int64_t step) {
  absl::Time deadline = ChiefNow() + absl::Minutes(10);
  for (int p = 0; p < cluster_.NumPs(); ++p) {
    if (!cluster_.StoreActive(p)) continue;
    while (true) {
      ASSIGN_OR_RETURN(PsStatusResponse st, cluster_.StoreAdmin(p)->Status());
      if (st.incarnation() != cluster_.StoreIncarnation(p)) {
        return absl::UnavailableError(
            absl::StrCat(cluster_.StoreAdmin(p)->name(), " restarted before step ", step, " was durable"));
      }
      if (!st.error().empty()) {
        return absl::DataLossError(
            absl::StrCat(cluster_.ps[p].admin->name(), " snapshot of step ", step, " failed: ", st.error()));
      }
      if (std::find(st.durable_snapshots().begin(), st.durable_snapshots().end(), step) !=
          st.durable_snapshots().end()) {
        break;
      }
      if (ChiefNow() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(cluster_.ps[p].admin->name(), " did not make step ", step, " durable"));
      }
      cluster_.registry->WaitForChange(cluster_.registry->version(), absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

void CheckpointCycle::TryCheckpoint() {
  absl::Status s = Checkpoint();
  if (s.ok()) {
    if (failures_ > 0) {
      cluster_.report(absl::StrCat("checkpoints work again after ", failures_, " failed"));
    }
    failures_ = 0;
    next_try_ = absl::InfinitePast();
    cluster_.EditStatus([&](JobStatusResponse* status) {
      status->set_checkpoint_failures(0);
      status->clear_checkpoint_error();
    });
    return;
  }
  const absl::Duration wait = cluster_.Backoff(failures_);
  ++failures_;
  next_try_ = ChiefNow() + wait;
  cluster_.report(absl::StrCat("WARNING: checkpoint abandoned (", failures_,
                               " failed in a row; training goes on, but progress since the checkpoint of step ",
                               cluster_.last_checkpoint_step, " is at risk): ", s.message(), "; next try in ",
                               absl::FormatDuration(wait)));
  if (cluster_.options.scalar) cluster_.options.scalar("checkpoint/failures_in_a_row", cluster_.MinStep(), failures_);
  cluster_.EditStatus([&](JobStatusResponse* status) {
    status->set_checkpoint_failures(failures_);
    status->set_checkpoint_error(std::string(s.message()));
  });
}

}  // namespace psrt
