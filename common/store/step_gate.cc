#include "common/store/step_gate.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"

namespace psrt {

StepGate::StepGate() { sweeper_ = std::thread([this] { SweepLoop(); }); }

StepGate::~StepGate() {
  if (sweeper_.joinable()) Stop(absl::UnavailableError("the parameter server is shutting down"));
}

void StepGate::Stop(const absl::Status& why) {
  std::deque<Waiter> left;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    left.swap(waiters_);
  }
  for (Waiter& w : left) w.run(why);
  sweeper_.join();
}

absl::Status StepGate::CheckConfig(const CreateVariablesRequest& req) {
  if (req.num_workers() < 1) return absl::InvalidArgumentError("num_workers must be at least 1");
  // num_workers sizes per-worker state: 2^31-1 workers meant a 16 GiB
  // allocation (found by tests/fuzz/ps_request_fuzzer).
  if (req.num_workers() > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers ", req.num_workers(), " is more than ", kMaxWorkers));
  }
  if (req.consistency().mode() == ConsistencyDef::BOUNDED_STALENESS && req.consistency().staleness() < 0) {
    return absl::InvalidArgumentError("consistency.staleness must be >= 0");
  }
  if (req.active_workers_size() == 0) {
    if (req.active_worker_steps_size() == 0) return absl::OkStatus();
    return absl::InvalidArgumentError("active_worker_steps given without active_workers");
  }
  if (req.active_workers_size() != req.num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("active_workers lists ", req.active_workers_size(),
                                                   " workers but num_workers is ", req.num_workers()));
  }
  if (req.active_worker_steps_size() != 0 && req.active_worker_steps_size() != req.active_workers_size()) {
    return absl::InvalidArgumentError(absl::StrCat("active_worker_steps has ", req.active_worker_steps_size(),
                                                   " steps for ", req.active_workers_size(), " active_workers"));
  }
  std::set<int> seen;
  for (int i = 0; i < req.active_workers_size(); ++i) {
    const int w = req.active_workers(i);
    if (w < 0 || w >= kMaxWorkers) {
      return absl::InvalidArgumentError(
          absl::StrCat("active_workers[", i, "] = ", w, " is not a worker index in [0, ", kMaxWorkers, ")"));
    }
    if (!seen.insert(w).second) {
      return absl::InvalidArgumentError(absl::StrCat("active_workers lists worker ", w, " twice"));
    }
    if (i < req.active_worker_steps_size() && req.active_worker_steps(i) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("active_worker_steps[", i, "] = ", req.active_worker_steps(i), " is negative"));
    }
  }
  return absl::OkStatus();
}

void StepGate::ConfigureLocked(const CreateVariablesRequest& req, bool new_generation) {
  consistency_ = req.consistency();
  num_workers_ = req.num_workers();
  active_workers_.clear();
  for (int w : req.active_workers()) {
    if (w >= static_cast<int>(active_workers_.size())) active_workers_.resize(w + 1, false);
    active_workers_[w] = true;
  }
  if (static_cast<int>(worker_next_step_.size()) < StalenessSlotsLocked()) {
    worker_next_step_.resize(StalenessSlotsLocked(), 0);
  }
  for (int i = 0; i < req.active_worker_steps_size(); ++i) {
    int64_t& next = worker_next_step_[req.active_workers(i)];
    next = new_generation ? req.active_worker_steps(i) : std::max(next, req.active_worker_steps(i));
  }
}

std::vector<StepGate::Run> StepGate::TakeParkedLocked() {
  std::vector<Run> parked;
  parked.reserve(waiters_.size());
  for (Waiter& w : waiters_) parked.push_back(std::move(w.run));
  waiters_.clear();
  return parked;
}

bool StepGate::CountsForStalenessLocked(int worker) const {
  if (active_workers_.empty()) return worker >= 0 && worker < num_workers_;
  return worker >= 0 && worker < static_cast<int>(active_workers_.size()) && active_workers_[worker];
}

int StepGate::StalenessSlotsLocked() const {
  return active_workers_.empty() ? num_workers_ : static_cast<int>(active_workers_.size());
}

bool StepGate::ReadyLocked(int worker, int64_t step) const {
  if (worker < 0 || stop_) return true;
  switch (consistency_.mode()) {
    case ConsistencyDef::SYNC:
      return sync_step_ >= step;
    case ConsistencyDef::BOUNDED_STALENESS: {
      int64_t slowest = step;
      for (int w = 0; w < static_cast<int>(worker_next_step_.size()); ++w) {
        if (CountsForStalenessLocked(w)) slowest = std::min(slowest, worker_next_step_[w]);
      }
      return step - slowest <= consistency_.staleness();
    }
    default:
      return true;
  }
}

void StepGate::CountPushLocked(int worker, int64_t step) {
  // Only workers of the job count for staleness (ReadyLocked reads no
  // others).
  if (!CountsForStalenessLocked(worker)) return;
  if (static_cast<int>(worker_next_step_.size()) <= worker) worker_next_step_.resize(StalenessSlotsLocked(), 0);
  int64_t next = step == std::numeric_limits<int64_t>::max() ? step : step + 1;
  worker_next_step_[worker] = std::max(worker_next_step_[worker], next);
}

void StepGate::ResetLocked(int64_t step) {
  global_step_ = 0;
  sync_step_ = step;
  worker_next_step_.assign(worker_next_step_.size(), step);
}

void StepGate::RestoreLocked(int64_t step, int64_t global_step, int64_t sync_step,
                             std::vector<int64_t> worker_next_step) {
  ResetLocked(step);
  global_step_ = global_step;
  sync_step_ = sync_step;
  worker_next_step_ = std::move(worker_next_step);
  if (static_cast<int>(worker_next_step_.size()) < StalenessSlotsLocked()) {
    worker_next_step_.resize(StalenessSlotsLocked(), step);
  }
}

void StepGate::RestoreAllAtLocked(int64_t step, int64_t global_step) {
  ResetLocked(step);
  global_step_ = global_step;
  worker_next_step_.assign(std::max<size_t>(worker_next_step_.size(), StalenessSlotsLocked()), step);
}

void StepGate::WaitOrRun(int worker, int64_t step, absl::Time deadline, Run run) {
  {
    absl::MutexLock lock(&mu_);
    if (!ReadyLocked(worker, step)) {
      waiters_.push_back(Waiter{worker, step, deadline, std::move(run)});
      return;
    }
  }
  run(absl::OkStatus());
}

void StepGate::WakeWaiters() {
  std::vector<Waiter> ready;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (ReadyLocked(it->worker, it->step)) {
        ready.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Waiter& w : ready) w.run(absl::OkStatus());
}

void StepGate::SweepLoop() {
  while (true) {
    std::vector<Waiter> expired;
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(20));
      if (stop_) return;
      absl::Time now = absl::Now();
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->deadline <= now) {
          expired.push_back(std::move(*it));
          it = waiters_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Waiter& w : expired) {
      w.run(absl::DeadlineExceededError(absl::StrCat(
          "pull for step ", w.step, " waited too long: other workers have not pushed")));
    }
  }
}

}  // namespace psrt
