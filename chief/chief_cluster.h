// ChiefCluster: the cluster as the chief believes it is, and the hands that
// reach it. Every part of the coordinator (coordinator.h) acts through one:
// the checkpoint cycle, recovery, failover, the memberships. It holds what
// they share (the records of every store and worker, the plan, the
// generation, the replicas' roles, the summary and the status page) and
// the primitive actions each of them is built from (create the variables
// on a store, start, pause and resume workers, move to a new generation or
// placement epoch). It decides nothing: the watch core (core/watch_core.h)
// decides, the coordinator runs its commands through the parts.
//
// Why public state: the parts are one thread's (the coordinator's) and
// change these records as the one class did before it was split; hiding
// them behind an accessor per field would add words, not safety. What
// other threads read (the status page) is behind mu_ (EditStatus/Status).
#ifndef PSRT_CHIEF_CHIEF_CLUSTER_H_
#define PSRT_CHIEF_CHIEF_CLUSTER_H_

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "chief/cluster_clients.h"
#include "chief/coordinator_options.h"
#include "chief/core/watch_core.h"
#include "chief/task_registry.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/cluster_spec.h"
#include "common/plan/job_plan.h"
#include "common/plan/job_planner.h"
#include "common/rpc/channel_cache.h"
#include "proto/chief_service.pb.h"
#include "proto/job.pb.h"

namespace psrt {

// The job's strategy as the chief acts on it; fixed for a run.
struct JobShape {
  JobShape(const TrainingJob& job, const ClusterSpec& cluster);

  // Workers all-reduce in a group (mirrored strategies, hybrid): then the
  // stores are the PS tasks (hybrid's embeddings) followed by one replica
  // per worker.
  bool collective = false;
  // Collective strategies are synchronous whatever the job's consistency says.
  bool sync = false;
  // Replicated shards (job.replication.factor 2; failover.h).
  bool replicated = false;
  // Elastic workers (worker_membership.h): the parameter-server strategy.
  bool elastic = false;
  // Elastic PS (ps_membership.h): failure.max_ps set and the job allows it.
  bool elastic_ps = false;
  // Why this job's PS cannot join or leave ("" when they can).
  std::string elastic_ps_refusal;
  int num_ps_tasks = 0;
  // How many data streams the data is cut into: failure.max_workers, or
  // the spec's workers.
  int num_streams = 0;
  // replication.failover_after_ms (default 500 ms): also the deadline of
  // the watch loop's probe of each PS when replicated (ps_probe_timeout;
  // 2 s otherwise), so a stopped PS is failed over after one unanswered
  // probe.
  absl::Duration failover_after;
  absl::Duration ps_probe_timeout;

  bool IsReplica(int store) const { return collective && store >= num_ps_tasks; }
  // A store's snapshot name in a checkpoint: "ps-N", or "worker-N".
  std::string StoreName(int store) const {
    return IsReplica(store) ? "worker-" + std::to_string(store - num_ps_tasks) : "ps-" + std::to_string(store);
  }
};

// What the chief believes of a task (core/watch_core.h), with the client
// that reaches it.
struct WorkerView : WorkerRecord {
  std::unique_ptr<WorkerControl> control;
};
struct PsView : PsRecord {
  std::unique_ptr<PsAdmin> admin;
};

// Replicated shards: store s (the placement's ps_task s) is served by PS
// task primary_of[s], its backup held by backup_of[s] (-1: none), at the
// placement epoch `epoch`.
struct ReplicaRoles {
  std::vector<int> primary_of;
  std::vector<int> backup_of;
  std::vector<bool> lost;  // failed over: its stores moved; used again once rebuilt
  // The handle reaching store s's core (its primary's PS, with the header).
  std::vector<std::unique_ptr<PsAdmin>> admins;
  int64_t epoch = 0;
  // By worker: the step each must pass before a rebuild (failover.h).
  std::vector<int64_t> unsettled_step;
};

class ChiefCluster {
 public:
  // Not owned: registry and channels outlive it.
  ChiefCluster(CoordinatorOptions options, TaskRegistry* registry, ChannelCache* channels);

  // --- Queries ---
  int NumPs() const { return static_cast<int>(ps.size()); }
  int NumWorkers() const { return static_cast<int>(workers.size()); }
  // The slowest worker's next step (the end when every one is done).
  int64_t MinStep() const { return MinStepOf(workers, end_step); }
  // Workers not removed (at least 1).
  int ActiveWorkers() const;
  // Collective group membership: the workers not removed, in task order:
  // rank r is the r-th of them, and it reads data shard r of their count.
  std::vector<int> GroupMembers() const { return MembersOf(workers); }
  // A store the chief uses: every PS, and the replicas of members.
  bool StoreActive(int store) const {
    return shape.IsReplica(store) ? !workers[store - shape.num_ps_tasks].removed : !ps[store].left;
  }
  bool LostToFailover(int p) const {
    return shape.replicated && p < static_cast<int>(roles.lost.size()) && roles.lost[p];
  }
  // The optimizer as the stores apply it: the job's, its schedule over the
  // whole run in updates of a variable (every worker's pushes in ASYNC,
  // one a step in SYNC and for replicas).
  OptimizerDef StoreOptimizer() const;
  // failure.retry_backoff_ms doubling per attempt up to retry_backoff_max_ms.
  absl::Duration Backoff(int attempt) const;
  WorkerAssignment AssignmentFor(int i, int64_t step) const;
  // ResumeRequest.end_step for a worker resumed at `step`: 0 (unchanged)
  // unless the run was stopped early, then its end (or `step`, for one
  // already past it: it is done at once).
  int64_t ResumeEndStep(int64_t step) const {
    return stopped_early_at_step < 0 ? 0 : std::max(end_step, step);
  }
  ReplicaRoute Route() const;
  // The handle reaching store s's core (its primary's PS when replicated).
  PsAdmin* StoreAdmin(int store) const;
  uint64_t StoreIncarnation(int store) const;
  // Every watched store's status now, as the watch probes them (empty: not
  // watched), one after another; and the records StreamFloors reads them
  // against (the stores and the generation).
  std::vector<std::optional<PsProbe>> StoreStatuses() const;
  WatchState StoresView() const;
  // A handle on store `store`'s copy on PS task `ps` at the current
  // placement epoch (a backup's too: control calls may address one).
  std::unique_ptr<PsAdmin> CopyAdmin(int ps, int store) const;

  // --- Actions on the tasks ---
  // Creates this store's variables (or checks them) and moves it to the
  // current generation; `reinitialize` sets them back to initial values.
  // UNAVAILABLE (nothing recorded) when the PS turns out to be a process
  // restarted since, unless `restoring` (a restore follows) or
  // `reinitialize`: a reconfiguration must not hide a lost state.
  absl::Status CreateVariablesOn(int store, bool reinitialize = false, bool restoring = false);
  absl::Status StartWorker(int i, int64_t step);
  // Runs fn(i) for every worker i at once, so that a worker that does not
  // answer costs one timeout, not one per worker; returns their statuses.
  std::vector<absl::Status> ForEachWorker(const std::function<absl::Status(int)>& fn);
  // Workers running or parked, paused at a step boundary at once (w.step:
  // the first step each did not push); which paused. Each first cancels
  // its calls to the PS tasks in `abandon` (lost ones, which would hold
  // calls to their deadline). `mark_unreachable`: one that does not answer
  // is marked unreachable (a membership change's new generation fences it).
  std::vector<bool> PauseWorkers(const std::vector<int>& abandon = {}, bool mark_unreachable = false);
  // Resumes the paused ones at their steps with the current route.
  void ResumeWorkers(const std::vector<bool>& paused, const std::string& after);
  // The first deal of the data streams (elastic jobs): every member from
  // stream batch 0 at step 0.
  absl::Status DealStreams();

  // --- Generations, epochs, the job state ---
  // A generation newer than any before (a restarted chief's too).
  void NewGeneration();
  // Raises the generation to the highest of `saved` (the job state's) and
  // those the PS and workers that answer now report; the epoch likewise.
  // Records each worker's step as it answers in steps_at_takeover.
  void LearnGenerationFloor(int64_t saved, int64_t saved_epoch);
  // Replicated: every store back to the placed roles (store s on ps:s,
  // its backup on the next), at a new epoch.
  void InitReplicas();
  void NewEpoch();
  // The stores' replicas and the failovers into the status (the status
  // page, /metrics); NewEpoch calls it, as every change of roles makes one.
  void PublishReplicas();
  // Counts a failure survived and keeps the count beside the manifests.
  void CountFailure();
  void SaveJobState(bool running);

  // --- The status page (other threads read it) ---
  JobStatusResponse Status() const;
  void EditStatus(const std::function<void(JobStatusResponse*)>& edit);

  // --- State (the coordinator thread's) ---
  const CoordinatorOptions options;
  TaskRegistry* const registry;
  ChannelCache* const channels;
  const JobShape shape;
  const std::function<void(const std::string&)> report;
  ManifestStore manifests;

  JobPlan plan;
  // Mirrored strategies: the variables each replica writes to a checkpoint
  // (greedy by bytes, as PS placement), so a checkpoint costs 1/N a worker.
  std::vector<std::vector<std::string>> replica_share;
  std::vector<PsView> ps;  // by store
  std::vector<WorkerView> workers;
  ReplicaRoles roles;
  // The step the run ends at (exclusive): the job's length, or sooner once
  // early stopping decided (stopped_early_at_step, then equal to it).
  int64_t end_step = 0;
  // The job's whole length (steps, or epochs in steps): the learning-rate
  // schedule spans it whatever end_step becomes.
  int64_t job_steps = 0;
  // Where early stopping ended the run (-1: it did not); kept in the job
  // state, so a chief restarted after the decision ends there too.
  int64_t stopped_early_at_step = -1;
  int64_t generation = 0;
  int64_t last_checkpoint_step = -1;
  absl::Time last_checkpoint_time;
  int64_t last_eval_step = 0;
  // Each worker's step as it answered when this chief started (0: no
  // answer): a takeover's rolled-back steps.
  std::vector<int64_t> steps_at_takeover;
  int membership_changes = 0;
  JobSummary summary;

 private:
  // Sends `req` (store s's variables) to s's primary and backup with their
  // roles at the current epoch.
  absl::Status ConfigureStore(int store, CreateVariablesRequest req);

  // The floors of generations and epochs are known (LearnGenerationFloor):
  // from then on each new one is saved in the job state before it is used.
  bool floor_learned_ = false;
  mutable absl::Mutex mu_;
  JobStatusResponse status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_CHIEF_CHIEF_CLUSTER_H_
