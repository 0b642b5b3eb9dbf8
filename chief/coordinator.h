// Coordinator: the chief's control loop. It never touches the per-step data
// path; it starts, watches, checkpoints and recovers.
//
// Run():
//   1. waits for every task of the spec to register (a deadline error lists
//      the missing ones);
//   2. plans the job (graph, gradients, pruning, placement), creates the
//      variables on every PS, and restores the newest committed checkpoint
//      (--restore=auto) or takes a first one at step 0, so that recovery
//      always has a consistent state to go back to;
//   3. starts every worker with its assignment and watches: progress lines,
//      checkpoints every N steps or seconds, evaluations, failures.
//
// Checkpoints are two-phase: workers pause (only in-flight pushes finish),
// every PS copies its state in memory, workers resume, the PS write their
// copies in the background, and only when every PS reports its copy durable
// does the chief commit a manifest (checkpoint_manifest.h).
//
// A PS that came back with a new incarnation means its state is gone:
// workers pause, the chief moves every PS to a new generation and restores
// the last committed checkpoint, and workers resume from its steps under
// that generation (a PS refuses pushes and pulls of any other, so a worker
// the chief could not reach cannot write into the restored values). A PS
// that only stops answering (hung, cut off) is waited for: workers park on
// their own failed calls, and resume where they were when it answers again
// with the same incarnation, without a restore. A worker that restarts is
// started again from its last step; ASYNC goes on without it meanwhile, SYNC
// waits for it (up to FailurePolicy.sync_wait_for_worker_ms).
//
// The chief never gives up on its own job: a failed checkpoint is abandoned
// (no manifest) and tried again with backoff, loudly; a failed recovery is
// retried with backoff; tasks that do not register or answer are waited for
// (FailurePolicy: for ever by default). Run() returns an error only for a
// job that cannot run (a bad job file, a worker that fails on its input).
//
// Status is thread-safe (gRPC threads). Workers' failure reports are logged
// by the chief service and not acted on here: what each PS answers the
// watch loop decides, so a stale or forged report changes nothing.
#ifndef PSRT_CHIEF_COORDINATOR_H_
#define PSRT_CHIEF_COORDINATOR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "chief/cluster_clients.h"
#include "chief/core/watch_core.h"
#include "common/plan/job_plan.h"
#include "common/plan/job_planner.h"
#include "common/plan/placement_move.h"
#include "chief/task_registry.h"
#include "common/cluster_spec.h"
#include "common/input/streams.h"
#include "common/optimizer.h"
#include "common/rpc/channel_cache.h"
#include "proto/chief_service.pb.h"
#include "proto/job.pb.h"

namespace psrt {

// The chief's clock for deadlines and durations: monotonic, so that a step
// of the wall clock (NTP, an operator) neither gives up on every silent
// task at once nor makes one wait for ever. WatchCore is handed this time.
inline absl::Time ChiefNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

struct CoordinatorOptions {
  TrainingJob job;
  ClusterSpec cluster;
  std::string checkpoint_dir;  // overrides job.checkpoint.dir when set
  std::string restore = "auto";  // auto | never | a step
  uint64_t incarnation = 0;
  // Gets each progress line (default: LOG(INFO)).
  std::function<void(const std::string&)> report;
  // Gets each scalar for TensorBoard (loss, examples/s, eval metrics).
  std::function<void(const std::string& tag, int64_t step, float value)> scalar;
  absl::Duration poll_interval = absl::Milliseconds(100);
  // Fault injection for tests: SIGKILL the chief just before it commits its
  // Nth checkpoint (after every PS made that snapshot durable). 0 = never.
  int fault_kill_before_commit = 0;
  absl::Duration report_interval = absl::Seconds(2);
};

struct JobSummary {
  std::string job_name;
  int64_t steps = 0;  // per worker
  int64_t total_steps = 0;
  int64_t restored_from_step = -1;
  double wall_seconds = 0;
  double examples_per_sec = 0;              // the run's mean: examples trained / wall_seconds
  double examples_per_sec_last_window = 0;  // the workers' last heartbeat figures, summed
  float final_loss = 0;
  std::map<std::string, float> metrics;  // final evaluation
  // The job has a test split but its final evaluation failed (metrics is
  // then empty): why. The chief exits 3 (training done, no final metric).
  std::string final_evaluation_error;
  std::vector<int64_t> checkpoints;
  int failures_survived = 0;
  // Replicated shards: PS failures survived by promoting backups, and the
  // worker steps a recovery took back (0 for a failover: none is redone).
  int failovers = 0;
  int64_t rolled_back_steps = 0;
  // Backups rebuilt on a PS that answered again after a failover.
  int rebuilds = 0;
  std::string checkpoint_dir;

  std::string ToJson() const;
};

class Coordinator {
 public:
  // Not owned: registry and channels outlive the coordinator.
  Coordinator(CoordinatorOptions options, TaskRegistry* registry, ChannelCache* channels,
              Planner planner, Evaluator evaluator);

  absl::StatusOr<JobSummary> Run();

  JobStatusResponse Status() const;

 private:
  // What the chief believes of a task (chief/core/watch_core.h), with the
  // client that reaches it.
  struct WorkerView : WorkerRecord {
    std::unique_ptr<WorkerControl> control;
  };
  struct PsView : PsRecord {
    std::unique_ptr<PsAdmin> admin;
  };

  absl::Status Setup();
  // Creates this PS's variables (or checks them) and moves it to the
  // current generation; `reinitialize` sets them back to initial values.
  // UNAVAILABLE (nothing recorded) when the PS turns out to be a process
  // restarted since, unless `restoring` (a restore follows) or
  // `reinitialize`: a reconfiguration must not hide a lost state.
  absl::Status CreateVariablesOn(int ps, bool reinitialize = false, bool restoring = false);
  absl::Status StartWorker(int i, int64_t step);
  WorkerAssignment AssignmentFor(int i, int64_t step) const;
  // One pass of watching; sets *done when every worker has finished. The
  // decisions are the core's (WatchCore); this runs its probes and commands.
  absl::Status Watch(bool* done);
  // Every watched store's / worker's status at once, so that a silent task
  // costs one deadline, not one per task.
  std::vector<std::optional<PsProbe>> ProbeStores();
  std::vector<std::optional<WorkerProbe>> ProbeWorkers();
  // The records the core decides on, and back from it.
  WatchState CoreState() const;
  void AdoptCoreState(const WatchState& state);
  // Runs one command of the core's; the pass goes on while it returns OK
  // and the command does not end it.
  absl::Status RunCommand(const WatchCommand& c);
  absl::Status Checkpoint();
  absl::Status WaitDurable(int64_t step);
  // Checkpoint(), and on failure the backoff and the loud warnings.
  void TryCheckpoint();
  // Back to the last checkpoint, every store restored and every worker
  // started again; `failure`: counted as a failure survived (a member
  // rejoining a collective group is not one).
  absl::Status Recover(const std::string& why, bool failure = true);
  // Creates the variables on every PS and restores the newest committed
  // checkpoint that every PS can restore whole, refusing (and reporting)
  // corrupt or missing ones and falling back to older ones. NOT_FOUND when
  // there is no manifest at all, FAILED_PRECONDITION when none restores.
  absl::StatusOr<CheckpointManifest> RestoreNewest();
  // Restores checkpoint `m` on every store: each PS its own snapshot when
  // `m` was taken with this layout, else (and always for mirrored replicas,
  // which write only their share) every store assembles its variables from
  // the checkpoint's stores the manifest names: another strategy, or
  // another number of PS or workers.
  absl::Status RestoreAll(const CheckpointManifest& m);
  // The step worker i resumes from after restoring `m`: its own in ASYNC
  // (workers run apart), the checkpoint's in a synchronous group (which may
  // not be the group that wrote it).
  int64_t StepAfterRestore(const CheckpointManifest& m, int i) const {
    return !Sync() && i < m.worker_step_size() ? m.worker_step(i) : m.step();
  }
  // RestoreNewest() until it succeeds or the job starts fresh (no
  // checkpoint, or none restorable and the policy says START_FRESH);
  // waits for the PS and backs off between tries. Sets the workers' steps.
  absl::Status RestoreOrStartFresh();
  // Every PS back to its initial values at once, workers at step 0.
  absl::Status StartFresh();
  // The data streams where checkpoint `m` saw them, dealt among the members
  // (RestoreStreams); the workers whose streams changed go into redealt_.
  void RestoreStreamsOf(const CheckpointManifest& m);
  absl::Status WaitForAllPs();
  absl::Status WaitForRegistration();
  // A generation newer than any before (a restarted chief's too).
  void NewGeneration();
  // Counts a failure survived and keeps the count beside the manifests.
  void CountFailure();
  void SaveJobState(bool running);
  // Raises generation_ to the highest of `saved` (the job state's) and
  // those the PS and workers that answer now report; epoch_ likewise.
  void LearnGenerationFloor(int64_t saved, int64_t saved_epoch);
  absl::Duration Backoff(int attempt) const;
  // Runs fn(i) for every worker i at once, so that a worker that does not
  // answer costs one timeout, not one per worker; returns their statuses.
  std::vector<absl::Status> ForEachWorker(const std::function<absl::Status(int)>& fn);
  absl::Status Evaluate(int64_t step);
  void Report(bool force);
  // The optimizer as the stores apply it: the job's, its schedule over the
  // whole run in updates of a variable (every worker's pushes in ASYNC,
  // one a step in SYNC and for replicas).
  OptimizerDef StoreOptimizer() const;
  int64_t MinStep() const { return MinStepOf(workers_, end_step_); }
  int NumPs() const { return static_cast<int>(ps_.size()); }
  int NumWorkers() const { return static_cast<int>(workers_.size()); }
  int ActiveWorkers() const;

  // Elastic workers (coordinator_elastic.cc), parameter-server strategy:
  // workers join (beyond the spec, up to failure.max_workers) and leave
  // (for good, or dead past the policy); the data streams are dealt again
  // at a step boundary, so no example of an epoch is skipped or read twice.
  bool Elastic() const { return !Collective(); }
  // How many data streams the data is cut into: failure.max_workers, or
  // the spec's workers.
  int NumStreams() const;
  // The first deal (Setup), every worker from stream batch 0 at step 0.
  absl::Status DealStreams();
  // Workers registered beyond workers_ get a view and join; a worker that
  // said it leaves is taken out. Returns true when it changed the
  // membership (then the caller's pass is over).
  absl::StatusOr<bool> WatchMembership();
  // Whether worker `w`, said to have left, still answers as the same
  // process (then it has not).
  bool StillServing(WorkerView* w);
  // Every member stopped at a step boundary, the streams dealt again among
  // the members (a leaver's go on where it stopped), the SYNC group
  // resized and every member started again under a new generation.
  // Starts each of `joining` on a run of no step with the streams it is
  // about to get, so that it decodes them before the others pause; its real
  // start reads them forward from there.
  void WarmUpJoiners(const std::vector<int>& joining);
  // SYNC: the step the group goes on at after a membership change, the
  // PS's oldest step not applied (GroupStep, from the workers, when a PS
  // does not answer).
  int64_t SyncGroupStep(const std::vector<bool>& paused);
  // `joining`: workers (removed or new) that become members now.
  absl::Status ChangeMembership(const std::string& why, const std::vector<int>& joining);
  // Elastic PS (coordinator_ps_move.cc): a PS beyond the spec joins (up to
  // failure.max_ps), one that says it leaves has its variables moved off;
  // ASYNC parameter-server jobs without replication.
  bool ElasticPs() const { return options_.job.failure().max_ps() > 0 && ElasticPsRefusal().empty(); }
  // Why this job's PS cannot join or leave ("" when they can).
  std::string ElasticPsRefusal() const;
  std::vector<int> LivePs() const;
  // A PS registered beyond ps_ joins, a live one that said it leaves goes.
  // Returns true when it moved variables (then the caller's pass is over).
  absl::StatusOr<bool> WatchPsMembership();
  // Moves `moves` to the placement `to`: copies while training goes on,
  // then pauses the workers at a step boundary, fences every PS at a new
  // generation, copies again, switches and restarts the workers. A failure
  // before the switch puts everything back as it was. `joining`/`leaving`:
  // the PS that becomes live / stops being live (-1: none).
  absl::Status MovePsVariables(const PsMovePlan& plan, const std::string& why, int joining, int leaving);
  // Whether checkpoint `m`'s stores held the variables the placement puts
  // on them now (the restore can read each store's own snapshot).
  bool SamePlacement(const CheckpointManifest& m) const;

  // Replicated shards (job.replication.factor 2; coordinator_failover.cc).
  // Store s (the placement's ps_task s) is served by PS task
  // primary_of_[s], its backup held by backup_of_[s] (-1: none), at the
  // placement epoch epoch_.
  bool Replicated() const { return ReplicationFactor(options_.job) == 2; }
  // replication.failover_after_ms (default 500 ms): also the deadline of the
  // watch loop's probe of each PS when replicated (PsProbeTimeout; 2 s
  // otherwise), so a stopped PS is failed over after one unanswered probe.
  absl::Duration FailoverAfter() const;
  absl::Duration PsProbeTimeout() const;
  void InitReplicas();
  // Sends `req` (store s's variables) to s's primary and backup with their
  // roles at the current epoch.
  absl::Status ConfigureStore(int store, CreateVariablesRequest req);
  // PS task `ps` is gone (`why`): its stores' backups are promoted at a new
  // epoch, workers paused, re-routed and resumed at their steps. When a
  // store loses both copies, falls back to Recover (the checkpoint).
  absl::Status Failover(int ps, const std::string& why);
  // After a checkpoint restore: every backup restored from the primary's
  // data in checkpoint `m` (`sources` when it was taken with another
  // layout); on failure the backups are dropped (DropBackups).
  absl::Status RestoreBackups(const CheckpointManifest& m, const std::vector<std::string>& sources);
  // Every store runs unreplicated from now on (`why` is logged).
  absl::Status DropBackups(const std::string& why);
  // Rebuilding backups (coordinator_rebuild.cc): a PS lost to a failover
  // that answers again holds its copies again. True when it ran one (the
  // caller's pass is over).
  absl::StatusOr<bool> MaybeRebuild();
  // ABORTED: postponed (the workers did not all pause where a copy is
  // exact), nothing changed.
  absl::Status Rebuild(int ps);
  // Workers running or parked, paused at a step boundary at once (w.step:
  // the first step each did not push); which paused. Each first cancels
  // its calls to the PS tasks in `abandon` (lost ones, which would hold
  // calls to their deadline). `mark_unreachable`: one that does not answer
  // is marked unreachable (a membership change's new generation fences it).
  std::vector<bool> PauseWorkers(const std::vector<int>& abandon = {}, bool mark_unreachable = false);
  // Resumes the paused ones at their steps with the current route.
  void ResumeWorkers(const std::vector<bool>& paused, const std::string& after);
  // After a failover: each worker's step as it says now (a push of it may
  // have been applied and not acknowledged, and be pushed again); a
  // rebuild waits until every worker is past it (coordinator_rebuild.cc).
  void NoteUnsettledSteps();
  void NewEpoch();
  // The stores' replicas and the failovers into status_ (the status page,
  // /metrics); NewEpoch calls it, as every change of roles makes one.
  void PublishReplicas();
  ReplicaRoute Route() const;
  // The handle reaching store s's core (its primary's PS, with the header).
  PsAdmin* StoreAdmin(int store) const;
  uint64_t StoreIncarnation(int store) const;
  bool LostToFailover(int ps) const { return Replicated() && ps < static_cast<int>(ps_lost_.size()) && ps_lost_[ps]; }

  // Collective group membership (coordinator_membership.cc). The members
  // are the workers not removed, in task order: rank r is the r-th of them,
  // and it reads data shard r of the members' count.
  std::vector<int> GroupMembers() const { return MembersOf(workers_); }
  // A store the chief uses: every PS, and the replicas of members.
  bool StoreActive(int store) const {
    return IsReplica(store) ? !workers_[store - NumPsTasks()].removed : !ps_[store].left;
  }
  // Which variables each member's replica writes to a checkpoint (1/N of
  // them, greedy by bytes); recomputed when the membership changes.
  absl::Status ShareReplicaVariables();
  // Replica `store` has not answered for `down`: past
  // failure.sync_wait_for_worker_ms, and with more members than
  // failure.min_workers (WatchCore::ShrinkGroupNow), its worker is removed
  // from the group (true).
  bool MaybeShrinkGroup(int store, absl::Duration down);
  void ShrinkGroup(int store, absl::Duration down);
  // Removed worker i answers again: the group's progress is checkpointed,
  // then the group is re-formed with it from that checkpoint.
  absl::Status RejoinGroup(int i);
  // Workers all-reduce in a group (mirrored strategies, hybrid): then the
  // stores are the PS tasks (hybrid's embeddings) followed by one replica
  // per worker.
  bool Collective() const { return IsCollective(options_.job); }
  int NumPsTasks() const { return options_.cluster.NumTasks(kPsJob); }
  bool IsReplica(int store) const { return Collective() && store >= NumPsTasks(); }
  // A store's snapshot name in a checkpoint: "ps-N", or "worker-N".
  std::string StoreName(int store) const {
    return IsReplica(store) ? "worker-" + std::to_string(store - NumPsTasks()) : "ps-" + std::to_string(store);
  }
  // Collective strategies are synchronous whatever the job's consistency says.
  bool Sync() const { return Collective() || options_.job.consistency().mode() == ConsistencyDef::SYNC; }

  const CoordinatorOptions options_;
  TaskRegistry* const registry_;
  ChannelCache* const channels_;
  const Planner planner_;
  const Evaluator evaluator_;
  const WatchCore core_;
  const std::function<void(const std::string&)> report_;
  ManifestStore manifests_;

  // Coordinator-thread state.
  JobPlan plan_;
  // Mirrored strategies: the variables each replica writes to a checkpoint
  // (greedy by bytes, as PS placement), so a checkpoint costs 1/N a worker.
  std::vector<std::vector<std::string>> replica_share_;
  std::vector<PsView> ps_;
  std::vector<WorkerView> workers_;
  int64_t end_step_ = 0;
  int64_t generation_ = 0;
  int64_t epoch_ = 0;
  // The floors of generations and epochs are known (LearnGenerationFloor):
  // from then on each new one is saved in the job state before it is used.
  bool floor_learned_ = false;
  // Each worker's step as it answered when this chief started (0: no
  // answer): a takeover's rolled-back steps.
  std::vector<int64_t> steps_at_takeover_;
  std::vector<int> primary_of_;
  std::vector<int> backup_of_;
  std::vector<bool> ps_lost_;  // failed over: its stores moved; used again once rebuilt
  std::vector<std::unique_ptr<PsAdmin>> store_admins_;
  std::vector<int64_t> unsettled_step_;  // by worker; see NoteUnsettledSteps
  // Workers the last restore gave other data streams: started with them,
  // not resumed (Recover).
  std::vector<int> redealt_;
  absl::Time next_rebuild_try_ = absl::InfinitePast();
  int rebuild_failures_ = 0;  // in a row
  int64_t last_checkpoint_step_ = -1;
  absl::Time last_checkpoint_time_;
  int64_t last_eval_step_ = 0;
  // The most updates any store has applied (its global step), as last
  // probed: the job's schedule gives the learning rate there (status,
  // TensorBoard).
  int64_t stores_global_step_ = 0;
  std::unique_ptr<Optimizer> lr_schedule_;  // made on first use
  int64_t last_scalar_step_ = -1;  // the step of the last training scalars written
  int checkpoint_failures_ = 0;  // in a row
  absl::Time next_checkpoint_try_ = absl::InfinitePast();
  absl::Time start_time_;
  absl::Time last_report_ = absl::InfinitePast();
  JobSummary summary_;
  int membership_changes_ = 0;
  int ps_moves_ = 0;
  // Variables a PS still holds after they moved off it (its drop failed):
  // dropped again at the next pass, so its snapshots hold no stale copy.
  std::map<int, std::vector<std::string>> pending_drops_;

  mutable absl::Mutex mu_;
  JobStatusResponse status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_CHIEF_COORDINATOR_H_
