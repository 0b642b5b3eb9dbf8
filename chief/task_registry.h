// TaskRegistry: which tasks of the cluster are alive, as which incarnation.
//
// Tasks register with their random incarnation id at start; a task that
// registers again with a different id has restarted (its memory is gone),
// one that heartbeats with an unknown id is told to register. A task whose
// last word (register or heartbeat) is older than the heartbeat timeout is
// expired. Every change bumps version(), and WaitForChange lets the chief's
// coordinator sleep until something happens instead of polling.
//
// Thread-safe: gRPC handlers call Register/Heartbeat while the coordinator
// reads.
#ifndef PSRT_CHIEF_TASK_REGISTRY_H_
#define PSRT_CHIEF_TASK_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cluster_spec.h"
#include "common/env.h"
#include "proto/chief_service.pb.h"

namespace psrt {

struct TaskState {
  TaskInfo info;  // incarnation 0 = never registered
  absl::Time last_seen = absl::InfinitePast();
  int restarts = 0;  // registrations with a new incarnation after the first
  // From the latest heartbeat.
  int64_t step = 0;
  float loss = 0;
  double examples_per_sec = 0;
  int epoch = 0;
  // Left for good (a heartbeat saying so): the first step it did not run.
  bool left = false;
  int64_t left_at_step = 0;
};

class TaskRegistry {
 public:
  enum class Registration { kFirst, kAgain, kRestarted };

  TaskRegistry(const ClusterSpec& cluster, absl::Duration heartbeat_timeout,
               Env* env = Env::Default());

  // INVALID_ARGUMENT for a task not in the spec, or incarnation 0. A
  // worker beyond the spec joins (kFirst) if its index is below the
  // AdmitWorkersUpTo bound: FAILED_PRECONDITION beyond it, naming the
  // policy, and UNAVAILABLE (retry) while a lower index has not joined, so
  // workers stay numbered 0..n-1.
  absl::StatusOr<Registration> Register(const TaskInfo& task);
  // Elastic jobs: workers may join up to `max_workers` (job.failure.
  // max_workers); 0 (the default) admits only the spec's.
  void AdmitWorkersUpTo(int max_workers);
  // The same for PS (job.failure.max_ps): they join in index order too,
  // and one may say it leaves (a heartbeat with `leaving`).
  void AdmitPsUpTo(int max_ps);
  // ABORTED if the task is not registered under this incarnation.
  absl::Status Heartbeat(const HeartbeatRequest& beat);

  // Blocks until every task of the spec has registered, or `timeout`
  // passes: then DEADLINE_EXCEEDED listing the missing tasks.
  absl::Status WaitForAll(absl::Duration timeout);
  std::vector<TaskId> Missing() const;
  // Registered tasks of `job` not heard from within the timeout.
  std::vector<TaskId> Expired(absl::string_view job) const;
  // Workers registered so far, spec's and joined (indices 0..n-1).
  int NumWorkers() const;
  // PS registered so far, spec's and joined (indices 0..n-1).
  int NumPs() const;
  // Forgets a task's incarnation: it must register again to count.
  void MarkDead(const TaskId& task);

  TaskState Get(const TaskId& task) const;
  std::vector<TaskState> All() const;
  uint64_t version() const;
  // Returns once version() differs from `seen` or `timeout` passes.
  void WaitForChange(uint64_t seen, absl::Duration timeout) const;

 private:
  static std::string Key(const TaskId& t) { return TaskName(t); }

  const absl::Duration timeout_;
  Env* const env_;  // not owned
  mutable absl::Mutex mu_;
  std::map<std::string, TaskState> tasks_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // Joins beyond the spec, in index order up to the bound.
  absl::StatusOr<std::map<std::string, TaskState>::iterator> JoinLocked(const TaskInfo& task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int CountLocked(absl::string_view job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  int max_workers_ ABSL_GUARDED_BY(mu_) = 0;
  int max_ps_ ABSL_GUARDED_BY(mu_) = 0;
  int spec_workers_ = 0;  // constant after construction
  int spec_ps_ = 0;       // constant after construction
};

}  // namespace psrt

#endif  // PSRT_CHIEF_TASK_REGISTRY_H_
