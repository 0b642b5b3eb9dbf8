// SnapshotWriter: the part of a parameter server (server_core.h) that puts
// snapshots on disk. The core decides what a snapshot holds and copies it
// at the pause; the writer owns what happens to the copy after that.
//
// It owns:
//   - the open SnapshotStores, one a checkpoint, at most kMaxOpenStores,
//     and the uses requests hold of them (Acquire / Release), and their
//     replacement when one is found corrupt or a write failed (Replace);
//   - the queue of copies waiting to be written (at most kMaxQueuedJobs)
//     and the thread that writes them, in order, and prunes after each;
//   - which steps are durable, the last write's error, and the result of
//     each job a caller waits for (WaitWritten);
//   - whether the chain of incremental snapshots broke (a write failed or
//     a store was replaced): the core's next snapshot is then full;
//   - the buffers snapshot copies are made in (copy_pool).
//
// Thread-safe. One lock, mu_, a leaf: the writer takes no other lock of the
// server under it and runs no caller's code under it. A caller holding a
// use of a store (Acquire) must not wait for the writer (WaitIdle,
// WaitWritten, Replace with wait_for_uses): the writer replacing that store
// waits for every use to end.
//
//   SnapshotWriter writer(options);
//   ASSIGN_OR_RETURN(SnapshotStore* store, writer.Acquire("ckpt-7"));
//   SnapshotWriter::Job job;  job.store = store;  job.snapshot = ...;
//   uint64_t seq = writer.Enqueue(std::move(job), /*waited=*/true);
//   writer.Release(store);
//   RETURN_IF_ERROR(writer.WaitWritten(seq));
#ifndef PSRT_COMMON_STORE_SNAPSHOT_WRITER_H_
#define PSRT_COMMON_STORE_SNAPSHOT_WRITER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/buffer_pool.h"
#include "common/snapshot/snapshot_store.h"
#include "proto/ps_service.pb.h"

namespace psrt {

// A checkpoint's name from a request: one path component of [A-Za-z0-9._-],
// at most 255 characters, not "." or "..". INVALID_ARGUMENT naming the
// field `checkpoint` and what was wrong.
absl::Status CheckCheckpointName(absl::string_view name);

// The directory a daemon keeps its snapshots under: `flag` (--snapshot_dir)
// made absolute, or ./psrt_snapshots when empty. Logs where
// CHECKPOINT/`store_name` will go.
std::string SnapshotRootFor(const std::string& flag, const std::string& store_name);

struct SnapshotWriterOptions {
  // <root>/CHECKPOINT/<store_name> is a checkpoint's store. An empty root
  // refuses Acquire (FAILED_PRECONDITION).
  std::string snapshot_root;
  std::string store_name;
  SnapshotStoreOptions store;
};

class SnapshotWriter {
 public:
  // At most this many stores stay open; a store in use is never closed to
  // make room (a restore read a store another request's checkpoint had
  // closed: found by tests/control_soak_test).
  static constexpr size_t kMaxOpenStores = 4;
  // Most snapshots copied in memory and waiting to be written: each is a
  // copy of every variable.
  static constexpr size_t kMaxQueuedJobs = 4;

  struct Job {
    PsSnapshot snapshot;
    SnapshotStore* store = nullptr;  // from Acquire; not owned
    int keep = 3;
    // SnapshotRequest.retain, when the chief sent it: prune to these.
    std::optional<std::vector<int64_t>> retain;
  };

  // Starts the writer thread.
  explicit SnapshotWriter(SnapshotWriterOptions options);
  // Writes every job still queued, then joins the thread.
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // RESOURCE_EXHAUSTED naming `step` when kMaxQueuedJobs wait already.
  absl::Status CheckQueueRoom(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // The store of `checkpoint`, opened on first use (its steps already on
  // disk count as durable), with a use held until Release. INVALID_ARGUMENT
  // for a bad name, FAILED_PRECONDITION without a snapshot root,
  // RESOURCE_EXHAUSTED when kMaxOpenStores are open and all busy, or the
  // store's own error.
  absl::StatusOr<SnapshotStore*> Acquire(const std::string& checkpoint) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(SnapshotStore* store) ABSL_LOCKS_EXCLUDED(mu_);

  // Replaces a store found corrupt by a fresh one holding what could be
  // saved of it (SnapshotStore::Salvage), or one a write failed on by the
  // same store reopened. Waits for the writer to be idle.
  // With `wait_for_uses`, also until no request uses the store (the caller
  // holds none); the writer waits so, as no holder of a use waits for the
  // writer (a restore takes its use once the queue is empty, a snapshot
  // gives its up once its job is queued): a store replaced under a reader
  // was freed while read (control_soak_test, SIGSEGV). Jobs queued for the
  // store fail; the chain of deltas breaks.
  void Replace(SnapshotStore* store, bool salvage, bool wait_for_uses = false) ABSL_LOCKS_EXCLUDED(mu_);

  // Queues `job` (its step no longer durable until written, the last error
  // cleared) and returns its place in the queue. With `waited`, its result
  // is kept for one WaitWritten(place).
  uint64_t Enqueue(Job job, bool waited) ABSL_LOCKS_EXCLUDED(mu_);
  // Until job `seq` (Enqueue(..., waited=true)) is written or failed: OK,
  // DATA_LOSS with the failure, or UNAVAILABLE when the writer stopped
  // first. Its own job's end: a step pruned by a later job (another
  // caller's retention) once left this wait, and the thread serving it,
  // for good.
  absl::Status WaitWritten(uint64_t seq) ABSL_LOCKS_EXCLUDED(mu_);
  // Until nothing is queued or being written.
  void WaitIdle() ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a snapshot was not written (or its store replaced) since the
  // last call: a delta then has no base. Cleared by reading.
  bool TakeChainBroken() { return chain_broken_.exchange(false); }

  // The durable steps and the last error, into a Status answer.
  void AddStatus(PsStatusResponse* r) ABSL_LOCKS_EXCLUDED(mu_);

  // Storage for snapshot copies, reused from one checkpoint to the next.
  BufferPool* copy_pool() const { return copy_pool_.get(); }

 private:
  struct QueuedJob {
    Job job;
    uint64_t seq = 0;     // its place in the queue
    bool waited = false;  // a WaitWritten waits for its result
  };

  void WriterLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Marks `job` written (or failed) for a WaitWritten on it.
  void FinishJobLocked(const QueuedJob& job, absl::Status result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `job`, refusing (ABORTED) a delta whose base is not the snapshot
  // written last (a failed write); after any failure the chain is broken.
  // Writer thread only.
  absl::StatusOr<int64_t> WriteLinked(const Job& job);

  const SnapshotWriterOptions options_;
  const std::shared_ptr<BufferPool> copy_pool_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<SnapshotStore>> stores_ ABSL_GUARDED_BY(mu_);
  std::map<const SnapshotStore*, int> store_uses_ ABSL_GUARDED_BY(mu_);  // see Acquire
  std::deque<QueuedJob> jobs_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> durable_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  // Jobs queued and finished so far, and the results of those a call waits
  // for: a wait ends when its own job is written or fails, whatever later
  // jobs prune or fail.
  uint64_t jobs_queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t jobs_finished_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, absl::Status> waited_results_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  // Set when a snapshot was not written: the chain's last link is missing.
  std::atomic<bool> chain_broken_{false};
  // Writer thread only: the snapshot it wrote last.
  const SnapshotStore* last_written_store_ = nullptr;
  int64_t last_written_step_ = -1;

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_SNAPSHOT_WRITER_H_
