#include "chief/task_registry.h"

#include "absl/strings/numbers.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace psrt {

TaskRegistry::TaskRegistry(const ClusterSpec& cluster, absl::Duration heartbeat_timeout, Env* env)
    : timeout_(heartbeat_timeout), env_(env) {
  absl::MutexLock lock(&mu_);
  for (const TaskId& t : cluster.AllTasks()) {
    // An evaluator (TensorFlow's `evaluator` job) follows committed
    // checkpoints on disk and never registers: waiting for it would hold
    // the job forever, and a heartbeat from it is refused as from a task
    // not in the spec.
    if (t.job() == kEvaluatorJob) continue;
    TaskState s;
    *s.info.mutable_task() = t;
    s.info.set_address(*cluster.AddressOf(t));
    tasks_[Key(t)] = s;
  }
  spec_workers_ = cluster.NumTasks(kWorkerJob);
  spec_ps_ = cluster.NumTasks(kPsJob);
}

void TaskRegistry::AdmitPsUpTo(int max_ps) {
  absl::MutexLock lock(&mu_);
  max_ps_ = max_ps;
}

int TaskRegistry::CountLocked(absl::string_view job) const {
  int n = 0;
  while (tasks_.count(Key(MakeTaskId(std::string(job), n)))) ++n;
  return n;
}

int TaskRegistry::NumPs() const {
  absl::MutexLock lock(&mu_);
  return CountLocked(kPsJob);
}

absl::StatusOr<std::map<std::string, TaskState>::iterator> TaskRegistry::JoinLocked(const TaskInfo& task) {
  // A worker or PS joining the running job (a TFJob or StatefulSet scaled up).
  const bool ps = task.task().job() == kPsJob;
  const int most = ps ? max_ps_ : max_workers_;
  const std::string policy = ps ? "job.failure.max_ps" : "job.failure.max_workers";
  const std::string job(ps ? kPsJob : kWorkerJob);
  const int index = task.task().index();
  if (index >= most) {
    return absl::FailedPreconditionError(absl::StrCat(TaskName(task.task()), " cannot join: the job allows at most ",
                                                      policy, "=", most, " ", job, " tasks (", job, ":0..",
                                                      most - 1, ")"));
  }
  if (index < 0 || !tasks_.count(Key(MakeTaskId(job, index - 1)))) {
    return absl::UnavailableError(absl::StrCat(TaskName(task.task()), " cannot join before ", job, ":", index - 1,
                                               " has: ", job, " tasks join in index order; retry"));
  }
  RETURN_IF_ERROR(ValidateAddress(task.address()));
  TaskState fresh;
  *fresh.info.mutable_task() = task.task();
  fresh.info.set_address(task.address());
  return tasks_.emplace(Key(task.task()), fresh).first;
}

void TaskRegistry::AdmitWorkersUpTo(int max_workers) {
  absl::MutexLock lock(&mu_);
  max_workers_ = max_workers;
}

int TaskRegistry::NumWorkers() const {
  absl::MutexLock lock(&mu_);
  return CountLocked(kWorkerJob);
}

absl::StatusOr<TaskRegistry::Registration> TaskRegistry::Register(const TaskInfo& task) {
  if (task.incarnation() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(TaskName(task.task()), ": incarnation 0"));
  }
  if (!task.collective_address().empty()) {
    // Peer-controlled: a worker's collective listener, handed to the other
    // members of its group. host:port, bounded, nothing else.
    const std::string& a = task.collective_address();
    size_t colon = a.rfind(':');
    int port = 0;
    if (task.task().job() != kWorkerJob || a.size() > 256 || colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(a.substr(colon + 1), &port) || port < 1 || port > 65535 ||
        a.find_first_of(" \t\r\n/") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(TaskName(task.task()), ": collective_address \"",
                                                     absl::CEscape(a.substr(0, 64)),
                                                     "\" is not a worker's host:port"));
    }
  }
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(Key(task.task()));
  if (it == tasks_.end() && ((task.task().job() == kWorkerJob && max_workers_ > spec_workers_) ||
                             (task.task().job() == kPsJob && max_ps_ > spec_ps_))) {
    ASSIGN_OR_RETURN(it, JoinLocked(task));
  }
  if (it == tasks_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", TaskName(task.task()), " is not in the cluster spec",
                     task.task().job() == kWorkerJob && max_workers_ > 0
                         ? absl::StrCat(" and job.failure.max_workers=", max_workers_, " admits no more workers")
                         : ""));
  }
  TaskState& s = it->second;
  Registration r = Registration::kAgain;
  if (s.info.incarnation() == 0) {
    r = s.restarts == 0 && s.last_seen == absl::InfinitePast() ? Registration::kFirst
                                                               : Registration::kRestarted;
  } else if (s.info.incarnation() != task.incarnation()) {
    r = Registration::kRestarted;
  }
  if (r == Registration::kRestarted) ++s.restarts;
  s.left = false;
  s.info.set_incarnation(task.incarnation());
  s.info.set_collective_address(task.collective_address());
  s.last_seen = env_->Now();
  ++version_;
  return r;
}

absl::Status TaskRegistry::Heartbeat(const HeartbeatRequest& beat) {
  if (beat.leaving() && (beat.step() < 0 || (beat.task().job() != kWorkerJob && beat.task().job() != kPsJob))) {
    return absl::InvalidArgumentError(absl::StrCat(TaskName(beat.task()), ": leaving at step ", beat.step(),
                                                   ": only a worker or a PS leaves, at a step >= 0"));
  }
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(Key(beat.task()));
  // Incarnation 0 means "not registered" (never, or marked dead): a beat
  // claiming it must not count as that task being alive.
  if (it == tasks_.end() || it->second.info.incarnation() == 0 ||
      it->second.info.incarnation() != beat.incarnation()) {
    return absl::AbortedError(absl::StrCat(TaskName(beat.task()), " incarnation ",
                                           beat.incarnation(), " is not registered"));
  }
  if (beat.leaving() && beat.task().job() == kPsJob && max_ps_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        TaskName(beat.task()), " cannot leave the running job: it does not let PS join or leave "
        "(job.failure.max_ps, ASYNC, no replication)"));
  }
  TaskState& s = it->second;
  s.last_seen = env_->Now();
  s.step = beat.step();
  s.loss = beat.loss();
  s.examples_per_sec = beat.examples_per_sec();
  s.epoch = beat.epoch();
  if (beat.leaving()) {
    s.left = true;
    s.left_at_step = beat.step();
  }
  ++version_;
  return absl::OkStatus();
}

std::vector<TaskId> TaskRegistry::Missing() const {
  absl::MutexLock lock(&mu_);
  std::vector<TaskId> out;
  for (const auto& [k, s] : tasks_) {
    if (s.info.incarnation() == 0) out.push_back(s.info.task());
  }
  return out;
}

absl::Status TaskRegistry::WaitForAll(absl::Duration timeout) {
  absl::Time deadline = env_->Now() + timeout;
  absl::MutexLock lock(&mu_);
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [k, s] : tasks_) {
      if (s.info.incarnation() == 0) return false;
    }
    return true;
  };
  while (!all()) {
    if (env_->Now() >= deadline) {
      std::vector<std::string> missing;
      for (const auto& [k, s] : tasks_) {
        if (s.info.incarnation() == 0) missing.push_back(absl::StrCat(k, " (", s.info.address(), ")"));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("tasks did not register within ", absl::FormatDuration(timeout), ": ",
                       absl::StrJoin(missing, ", ")));
    }
    uint64_t v = version_;
    auto changed = [this, v]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ != v; };
    mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(200));
  }
  return absl::OkStatus();
}

std::vector<TaskId> TaskRegistry::Expired(absl::string_view job) const {
  absl::Time now = env_->Now();
  absl::MutexLock lock(&mu_);
  std::vector<TaskId> out;
  for (const auto& [k, s] : tasks_) {
    if (s.info.task().job() == job && s.info.incarnation() != 0 && now - s.last_seen > timeout_) {
      out.push_back(s.info.task());
    }
  }
  return out;
}

void TaskRegistry::MarkDead(const TaskId& task) {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(Key(task));
  if (it == tasks_.end()) return;
  it->second.info.set_incarnation(0);
  ++version_;
}

TaskState TaskRegistry::Get(const TaskId& task) const {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(Key(task));
  return it == tasks_.end() ? TaskState() : it->second;
}

std::vector<TaskState> TaskRegistry::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<TaskState> out;
  for (const auto& [k, s] : tasks_) out.push_back(s);
  return out;
}

uint64_t TaskRegistry::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

void TaskRegistry::WaitForChange(uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ != seen; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
}

}  // namespace psrt
