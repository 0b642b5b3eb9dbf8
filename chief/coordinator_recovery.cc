// The coordinator's checkpoint, recovery and evaluation steps.
#include <signal.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chief/coordinator.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {

absl::Status Coordinator::Checkpoint() {
  const absl::Time start = absl::Now();
  // Phase one: quiesce, copy in memory on every PS, let training go on.
  std::vector<int64_t> steps(NumWorkers());
  for (int i = 0; i < NumWorkers(); ++i) {
    WorkerView& w = workers_[i];
    if (!w.removed && w.reachable &&
        (w.state == WorkerStatusResponse::RUNNING || w.state == WorkerStatusResponse::PAUSED)) {
      absl::StatusOr<int64_t> s = w.control->Pause(generation_);
      if (s.ok()) w.step = *s;
    }
    steps[i] = w.step;
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
  std::vector<SnapshotResponse> shards(NumPs());
  absl::Status copy_status;
  for (int p = 0; p < NumPs() && copy_status.ok(); ++p) {
    absl::StatusOr<SnapshotResponse> r = ps_[p].admin->Snapshot(step, manifests_.dir(), false, keep);
    if (r.ok()) {
      shards[p] = *r;
    } else {
      copy_status = r.status();
    }
  }
  const absl::Duration pause = absl::Now() - start;
  for (int i = 0; i < NumWorkers(); ++i) {
    WorkerView& w = workers_[i];
    if (!w.removed && w.reachable &&
        (w.state == WorkerStatusResponse::RUNNING || w.state == WorkerStatusResponse::PAUSED)) {
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
  m.set_commit_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  m.set_job_name(options_.job.name());
  m.set_failures_survived(summary_.failures_survived);
  for (int64_t s : steps) m.add_worker_step(s);
  for (int p = 0; p < NumPs(); ++p) {
    CheckpointManifest::Shard* sh = m.add_shard();
    sh->set_ps_task(p);
    sh->set_path(shards[p].path());
    sh->set_bytes(shards[p].bytes());
  }
  for (const VariablePlacement& vp : plan_.placement.variable()) {
    CheckpointManifest::Variable* v = m.add_variable();
    v->set_name(vp.variable().name());
    for (int64_t d : vp.variable().shape().dim()) v->add_shape(d);
  }
  RETURN_IF_ERROR(manifests_.Commit(m));
  manifests_.Prune(keep);
  last_checkpoint_step_ = step;
  last_checkpoint_time_ = absl::Now();
  summary_.checkpoints.push_back(step);
  report_(absl::StrCat("checkpoint of step ", step, " committed (training paused ",
                       absl::FormatDuration(pause), ", total ",
                       absl::FormatDuration(absl::Now() - start), ")"));
  return absl::OkStatus();
}

absl::Status Coordinator::WaitDurable(int64_t step) {
  absl::Time deadline = absl::Now() + absl::Minutes(10);
  for (int p = 0; p < NumPs(); ++p) {
    while (true) {
      ASSIGN_OR_RETURN(PsStatusResponse st, ps_[p].admin->Status());
      if (!st.error().empty()) {
        return absl::DataLossError(absl::StrCat(ps_[p].admin->name(), " snapshot of step ", step,
                                                " failed: ", st.error()));
      }
      if (std::find(st.durable_snapshots().begin(), st.durable_snapshots().end(), step) !=
          st.durable_snapshots().end()) {
        break;
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(ps_[p].admin->name(), " did not make step ", step, " durable"));
      }
      registry_->WaitForChange(registry_->version(), absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::WaitForAllPs(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  for (int p = 0; p < NumPs(); ++p) {
    while (true) {
      absl::StatusOr<PsStatusResponse> st = ps_[p].admin->Status(absl::Seconds(1));
      if (st.ok()) break;
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(ps_[p].admin->name(), " did not come back within ",
                                                   absl::FormatDuration(timeout), ": ",
                                                   st.status().message()));
      }
      registry_->WaitForChange(registry_->version(), absl::Milliseconds(50));
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::Recover(const std::string& why) {
  const absl::Time start = absl::Now();
  report_(absl::StrCat("recovering: ", why));
  {
    absl::MutexLock lock(&mu_);
    status_.set_state(JobStatusResponse::RECOVERING);
  }
  for (WorkerView& w : workers_) {
    if (w.state == WorkerStatusResponse::RUNNING || w.state == WorkerStatusResponse::PAUSED) {
      (void)w.control->Pause(generation_);
    }
  }
  RETURN_IF_ERROR(WaitForAllPs(absl::Minutes(2)));
  ASSIGN_OR_RETURN(CheckpointManifest m, RestoreNewest());
  ++generation_;
  ++summary_.failures_survived;
  for (int i = 0; i < NumWorkers(); ++i) {
    WorkerView& w = workers_[i];
    w.step = i < m.worker_step_size() ? m.worker_step(i) : m.step();
    if (w.state == WorkerStatusResponse::DONE) continue;
    absl::Status s = w.control->Resume(w.step, generation_);
    if (!s.ok()) {
      // Down or restarted: the watch loop starts it when it answers.
      LOG(WARNING) << "resume after recovery: " << s;
      w.incarnation = 0;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    status_.set_state(JobStatusResponse::RUNNING);
    failure_reports_.clear();
  }
  report_(absl::StrCat("recovered to the checkpoint of step ", m.step(), " in ",
                       absl::FormatDuration(absl::Now() - start), "; failures survived: ",
                       summary_.failures_survived));
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManifest> Coordinator::RestoreNewest() {
  for (int p = 0; p < NumPs(); ++p) RETURN_IF_ERROR(CreateVariablesOn(p));
  std::vector<int64_t> steps = manifests_.Steps();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    absl::StatusOr<CheckpointManifest> m = manifests_.Read(*it);
    if (!m.ok()) {
      report_(absl::StrCat("refused checkpoint: ", m.status().message()));
      continue;
    }
    absl::Status restored;
    for (int p = 0; p < NumPs() && restored.ok(); ++p) {
      restored = ps_[p].admin->Restore(m->step(), manifests_.dir()).status();
    }
    if (restored.ok()) return m;
    if (restored.code() != absl::StatusCode::kDataLoss && restored.code() != absl::StatusCode::kNotFound) {
      return restored;
    }
    report_(absl::StrCat("refused checkpoint of step ", m->step(), ": ", restored.message()));
  }
  return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", manifests_.dir(),
                                          " can be restored"));
}

absl::Status Coordinator::Evaluate(int64_t step) {
  // Every dense variable, whole: shards of a partitioned one are joined by rows.
  std::map<std::string, Tensor> variables;
  for (const VariablePlacement& vp : plan_.placement.variable()) {
    if (vp.variable().kind() == VariableDef::HASH_TABLE) continue;
    std::vector<Tensor> parts;
    for (const VariablePlacement::Shard& shard : vp.shard()) {
      ASSIGN_OR_RETURN(auto pulled, ps_[shard.ps_task()].admin->Pull({vp.variable().name()}));
      if (pulled.size() != 1) {
        return absl::InternalError(absl::StrCat(ps_[shard.ps_task()].admin->name(), " returned ",
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
  ASSIGN_OR_RETURN(auto metrics, evaluator_(variables));
  summary_.metrics = metrics;
  last_eval_step_ = step;
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
      checkpoint_dir, "\",\n  \"failures_survived\": ", failures_survived, "\n}\n");
}

}  // namespace psrt
