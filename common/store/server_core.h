// ParameterServerCore: everything a parameter server does, without gRPC. It
// lives below the daemons because two serve it: a PS holds its shards of the
// variables in one, and a worker of a mirrored strategy its full replica.
// The gRPC service (ps_service.h) is a thin edge over it, and unit tests
// drive it directly.
//
// Consistency (set per job by CreateVariables):
//   ASYNC              a push is applied at once; pulls never wait.
//   SYNC               step t's gradients are summed until every worker has
//                      pushed one, then their mean is applied once; a pull
//                      for step t+1 waits until then.
//   BOUNDED_STALENESS  pushes apply at once; a pull for step t waits while t
//                      is more than `staleness` steps ahead of the slowest
//                      worker's next step.
// Waiting pulls never hold a thread: their callbacks run when the state they
// wait for exists, or with DEADLINE_EXCEEDED at their deadline.
//
// A push carries (worker, incarnation, step); one already applied is
// acknowledged again and changes nothing. A step may come in parts
// (RequestId.bucket, push_parts.h): each applied once, the step counted
// once all are in. Bad input (an unknown variable, a
// wrong shape, an id out of range) is refused before anything changes.
//
// Snapshot copies every variable, slot and counter in memory while pushes
// are held off (the only pause training sees), then a background thread
// (SnapshotWriter) writes the copy to the task's RocksDB and marks the step
// durable. Restore reads and checks a whole snapshot before it replaces
// anything.
//
// The core checks requests and decides; parts act, each with a header that
// says what it owns and how it locks:
//   SnapshotWriter (snapshot_writer.h)  the stores, the write queue and its
//                                       thread, the durable steps.
//   StepGate (step_gate.h)              the consistency, the step counters,
//                                       the parked pulls and their sweeper.
//   PushLedger (push_ledger.h)          the record of pushes, bucket parts,
//                                       the SYNC step gathered.
// Lock order: whole_step_mu_, then mu_ (the variables), then gate_.mu()
// (which guards the ledger too), then a variable's own lock. stats_mu_ and
// the writer's lock are leaves. A parked pull's callback runs under none of
// the gate's or writer's locks.
//
// Thread-safe.
#ifndef PSRT_COMMON_STORE_SERVER_CORE_H_
#define PSRT_COMMON_STORE_SERVER_CORE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_pool.h"
#include "common/optimizer.h"
#include "common/transport/ps_types.h"
#include "common/snapshot/snapshot_store.h"
#include "common/store/data_streams.h"
#include "common/store/push_ledger.h"
#include "common/store/snapshot_writer.h"
#include "common/store/step_gate.h"
#include "common/store/variable.h"
#include "common/work_pool.h"
#include "proto/ps_service.pb.h"

namespace psrt {

struct ServerCoreOptions {
  int task_index = 0;
  uint64_t incarnation = 0;
  int64_t max_request_bytes = int64_t{1} << 30;
  int64_t max_rows_per_request = 1 << 22;
  // Largest answer one Pull or PullRows may make (--max_pull_response_mb):
  // a bigger one is refused with RESOURCE_EXHAUSTED before anything is
  // read or copied.
  int64_t max_pull_response_bytes = INT64_MAX;
  // Limits on what clients may make here, refused with RESOURCE_EXHAUSTED:
  // variables held, bytes of variables and optimizer slots, rows of each
  // hash table.
  int64_t max_variables = 100000;
  int64_t max_memory_bytes = INT64_MAX;
  int64_t max_hash_table_rows = INT64_MAX;
  SnapshotStoreOptions snapshot;
  // Where snapshots live (--snapshot_dir): checkpoint NAME of a request in
  // <snapshot_root>/NAME/ps-<task_index>. Requests name checkpoints, never
  // paths. Empty: Snapshot and Restore are refused (FAILED_PRECONDITION).
  std::string snapshot_root;
  // Threads that apply a push's optimizer updates (--apply_threads): the
  // variables of one push and row ranges of a large one in parallel.
  // 0 = one per core; 1 = all on the thread serving the push.
  int apply_threads = 0;
  // The snapshot store's name under a checkpoint directory; empty =
  // "ps-<task_index>". A mirrored worker's replica is "worker-<index>".
  std::string store_name;
  // Whether a Pull or PullRows sees only whole steps: no push half applied,
  // and the global step it reports is the one its values are at. For a
  // mirrored worker's replica (one push at a time; the chief's and tests'
  // reads compare replicas bit for bit). Off on a PS, whose reads run
  // beside the many workers' applies, as TensorFlow's do.
  bool reads_see_whole_steps = false;
};

class ParameterServerCore {
 public:
  using PullDone = std::function<void(absl::Status, NamedTensors, int64_t global_step)>;

  explicit ParameterServerCore(ServerCoreOptions options);
  ~ParameterServerCore();

  absl::StatusOr<CreateVariablesResponse> CreateVariables(const CreateVariablesRequest& req);

  // `done` runs once, maybe on another thread, maybe before Pull returns.
  // worker < 0 (the chief) never waits.
  void Pull(std::vector<std::string> names, int worker, int64_t step, absl::Time deadline,
            PullDone done);
  // `read_only`: hash-table ids without a row are answered with their
  // initial values and no row is made.
  void PullRows(std::vector<std::pair<std::string, Tensor>> ids, int worker, int64_t step,
                absl::Time deadline, PullDone done, bool read_only = false);
  absl::StatusOr<PushResponse> Push(const RequestId& id, const NamedTensors& gradients);
  absl::StatusOr<PushResponse> PushRows(const RequestId& id, const std::vector<SparseUpdate>& rows);

  // OK when `generation` is the one the chief last set (CreateVariables or
  // Restore), else FAILED_PRECONDITION naming both. Pushes check it
  // themselves, atomically with the apply; the service checks pulls with it.
  absl::Status CheckGeneration(int64_t generation, absl::string_view what) const;

  absl::StatusOr<SnapshotResponse> Snapshot(const SnapshotRequest& req);
  // Restores this store's own snapshot, or with req.source the pieces of a
  // checkpoint taken with another layout (restore_assembly.h).
  absl::StatusOr<RestoreResponse> Restore(const RestoreRequest& req);
  PsStatusResponse Status();
  // Moving variables to another PS while the job runs (server_core_move.cc;
  // MoveVariablesRequest says the order). Refused whole, before anything
  // changes, for an unknown or repeated name, an import whose def or state
  // differs from the variable here, or another generation.
  absl::StatusOr<MoveVariablesResponse> MoveVariables(const MoveVariablesRequest& req);
  // A PS leaving the job: true once it holds no variable (the chief moved
  // them all off), false at `deadline`.
  bool WaitHoldsNone(absl::Time deadline);

  int64_t max_request_bytes() const { return options_.max_request_bytes; }
  // Storage for pulled rows and received gradients; reused once gRPC and
  // the optimizer are done with them. (Dense pulls copy nothing: they share
  // the variable's storage, copy-on-write.)
  BufferPool* pool() const { return pool_.get(); }
  uint64_t incarnation() const { return options_.incarnation; }
  std::string StoreName() const {
    return options_.store_name.empty() ? "ps-" + std::to_string(options_.task_index) : options_.store_name;
  }

 private:
  // Incremental checkpoints: the snapshot the next delta would chain to
  // (server_core_delta.cc).
  struct DeltaChain {
    bool valid = false;
    std::string checkpoint;
    std::vector<std::string> variables;
    int64_t step = 0;
    int deltas = 0;  // since the last full snapshot
  };
  static constexpr int kMaxFullEvery = 1000;
  // At the snapshot pause: whether this snapshot of `vars` is a delta on
  // chain_ (whose step goes to *base_step), which it then becomes.
  bool DeltaNextLocked(const SnapshotRequest& req, const std::vector<Variable*>& vars, int64_t* base_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Variable*> Find(const std::string& name) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // What a restore checks a snapshot's index against before reading it:
  // each variable's piece fits this PS's variable of that name; with
  // `all_here`, a name this PS lacks is refused too (its own layout).
  SnapshotReadOptions RestoreReadOptions(bool all_here) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<RestoreResponse> RestoreFromSources(const RestoreRequest& req);
  // RESOURCE_EXHAUSTED naming --max_pull_response_mb when an answer of
  // `bytes` is over options_.max_pull_response_bytes.
  absl::Status CheckPullResponse(absl::string_view method, int64_t bytes) const;
  absl::Status CheckGenerationLocked(int64_t generation, absl::string_view what) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Step counters and SYNC aggregation back to `step`, nothing seen.
  void ResetStepsLocked(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_.mu());
  // A whole step of `id` taken: recorded, and counted for staleness.
  void RecordLocked(const RequestId& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_.mu());

  const ServerCoreOptions options_;
  const std::shared_ptr<BufferPool> pool_ = BufferPool::Create();
  // Applies pushes' updates (ServerCoreOptions.apply_threads).
  const std::unique_ptr<WorkPool> apply_pool_;

  // The variables. Readers: pulls and pushes (each variable locks itself);
  // writers: create, snapshot copy, restore.
  // Held by a whole Push (exclusive) and by a read (shared) when
  // options_.reads_see_whole_steps; taken before mu_.
  mutable absl::Mutex whole_step_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // A shared hold of whole_step_mu_ where the options ask for it.
  std::optional<absl::ReaderMutexLock> WholeStepRead() const {
    if (!options_.reads_see_whole_steps) return std::nullopt;
    return std::optional<absl::ReaderMutexLock>(std::in_place, &whole_step_mu_);
  }
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Variable>> variables_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  OptimizerDef optimizer_def_ ABSL_GUARDED_BY(mu_);
  // The chief's generation (see RequestId.generation); 0 until it sets one.
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::atomic<int64_t> stale_refused_{0};

  // When pulls may run, the step counters and the parked pulls
  // (step_gate.h). Its mutex is taken after mu_ and also guards the record
  // of pushes, so that a push's check, record and count are one.
  StepGate gate_;
  // Pushes taken: the dedup record, bucket parts, the SYNC step gathered
  // (push_ledger.h).
  PushLedger ledger_ ABSL_GUARDED_BY(gate_.mu());
  // ASYNC: what each data stream had applied here since the last restore
  // or fresh start, whole batches and parts of one (RequestId.data_*,
  // data_streams.h). Kept across a new generation: a batch a leaver
  // pushed here and not to another PS, or only in part, is pushed again by
  // the stream's next holder, and only what is missing is applied.
  DataStreams streams_ ABSL_GUARDED_BY(gate_.mu());

  // Counters for Status.
  absl::Mutex stats_mu_;
  int64_t pushes_ ABSL_GUARDED_BY(stats_mu_) = 0;
  int64_t pulls_ ABSL_GUARDED_BY(stats_mu_) = 0;
  int64_t last_pushes_ ABSL_GUARDED_BY(stats_mu_) = 0;
  int64_t last_pulls_ ABSL_GUARDED_BY(stats_mu_) = 0;
  absl::Time last_stats_ ABSL_GUARDED_BY(stats_mu_);

  DeltaChain chain_ ABSL_GUARDED_BY(mu_);
  // Snapshot stores, the write queue and its thread (snapshot_writer.h).
  // Reset in the destructor, after the gate stops: its thread is joined
  // before any state here goes.
  std::unique_ptr<SnapshotWriter> writer_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_SERVER_CORE_H_
