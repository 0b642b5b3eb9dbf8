#include "common/store/snapshot_writer.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psrt {
namespace {

std::shared_ptr<BufferPool> MakeCopyPool() {
  BufferPoolOptions pool;
  pool.max_cached_bytes = size_t{16} << 30;
  return BufferPool::Create(pool);
}

}  // namespace

absl::Status CheckCheckpointName(absl::string_view name) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", why, " (a name of [A-Za-z0-9._-], not a path)"));
  };
  if (name.empty()) return bad("empty");
  if (name.size() > 255) return bad(absl::StrCat("a name of ", name.size(), " characters"));
  if (name == "." || name == "..") return bad(absl::StrCat("'", name, "'"));
  for (char ch : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-') {
      return bad(absl::StrCat("character 0x", absl::Hex(static_cast<unsigned char>(ch), absl::kZeroPad2)));
    }
  }
  return absl::OkStatus();
}

std::string SnapshotRootFor(const std::string& flag, const std::string& store_name) {
  std::error_code ec;
  if (flag.empty()) {
    std::string root = (std::filesystem::current_path(ec) / "psrt_snapshots").string();
    LOG(WARNING) << "no --snapshot_dir: snapshots go under " << root
                 << " (give the directory above the chief's --checkpoint_dir to share it)";
    return root;
  }
  std::string root = std::filesystem::absolute(flag, ec).lexically_normal().string();
  LOG(INFO) << "snapshots under " << root << "/CHECKPOINT/" << store_name;
  return root;
}

SnapshotWriter::SnapshotWriter(SnapshotWriterOptions options)
    : options_(std::move(options)), copy_pool_(MakeCopyPool()) {
  thread_ = std::thread([this] { WriterLoop(); });
}

SnapshotWriter::~SnapshotWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::Status SnapshotWriter::CheckQueueRoom(int64_t step) {
  // Each queued snapshot is a copy of every variable in memory: a flood of
  // requests not waiting for durability grew the queue without bound.
  absl::MutexLock lock(&mu_);
  if (jobs_.size() >= kMaxQueuedJobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "snapshot of step ", step, " refused: ", jobs_.size(), " snapshots are already waiting to be written"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SnapshotStore*> SnapshotWriter::Acquire(const std::string& checkpoint) {
  // The request names a checkpoint; the directory is this PS's own (issue
  // #17: stores were made in any directory a request named, '../..'
  // included, and a caller could restore a model it had prepared).
  RETURN_IF_ERROR(CheckCheckpointName(checkpoint));
  if (options_.snapshot_root.empty()) {
    return absl::FailedPreconditionError("this PS has no snapshot directory (--snapshot_dir)");
  }
  std::string path =
      absl::StrCat(absl::StripSuffix(options_.snapshot_root, "/"), "/", checkpoint, "/", options_.store_name);
  absl::MutexLock lock(&mu_);
  auto it = stores_.find(path);
  if (it != stores_.end()) {
    ++store_uses_[it->second.get()];
    return it->second.get();
  }
  if (stores_.size() >= kMaxOpenStores) {
    // Close a store nothing is writing to or queued for: requests naming
    // ever new directories no longer leak a RocksDB (and its files) each.
    for (auto victim = stores_.begin(); victim != stores_.end(); ++victim) {
      bool busy = writing_ || store_uses_.count(victim->second.get()) > 0;
      for (const QueuedJob& queued : jobs_) busy = busy || queued.job.store == victim->second.get();
      if (busy) continue;
      LOG(INFO) << "closing the snapshot store " << victim->first;
      stores_.erase(victim);
      break;
    }
    if (stores_.size() >= kMaxOpenStores) {
      return absl::ResourceExhaustedError(absl::StrCat("snapshot: ", stores_.size(), " stores are busy"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> store, SnapshotStore::Open(path, options_.store));
  // Steps already durable from an earlier life of this task.
  for (int64_t step : store->Steps()) durable_.insert(step);
  SnapshotStore* raw = store.get();
  stores_[path] = std::move(store);
  ++store_uses_[raw];
  return raw;
}

void SnapshotWriter::Release(SnapshotStore* store) {
  absl::MutexLock lock(&mu_);
  auto it = store_uses_.find(store);
  if (it != store_uses_.end() && --it->second == 0) store_uses_.erase(it);
}

void SnapshotWriter::Replace(SnapshotStore* store, bool salvage, bool wait_for_uses) {
  absl::MutexLock lock(&mu_);
  auto idle = [this, store, wait_for_uses]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !writing_ && (!wait_for_uses || store_uses_.count(store) == 0);
  };
  mu_.Await(absl::Condition(&idle));
  auto it = std::find_if(stores_.begin(), stores_.end(), [store](const auto& s) { return s.second.get() == store; });
  if (it == stores_.end()) return;  // replaced already
  const std::string path = it->first;
  store_uses_.erase(store);  // a writer's replacement: readers' uses end with the old store
  // Queued writes name the store about to be replaced: they fail, and the
  // chief abandons those checkpoints and takes new ones.
  for (QueuedJob& queued : jobs_) {
    if (queued.job.store == store) queued.job.store = nullptr;
  }
  chain_broken_.store(true);  // a delta's base is in the store replaced
  std::string report = absl::StrCat("reopened the snapshot store ", path, " after a failed write");
  absl::StatusOr<std::unique_ptr<SnapshotStore>> fresh =
      salvage ? SnapshotStore::Salvage(std::move(it->second), &report) : SnapshotStore::Reopen(std::move(it->second));
  durable_.clear();
  if (!fresh.ok()) {
    LOG(ERROR) << "replacing the snapshot store " << path << ": " << fresh.status();
    stores_.erase(it);  // opened afresh by the next snapshot or restore
    return;
  }
  LOG(ERROR) << report;
  for (int64_t step : (*fresh)->Steps()) durable_.insert(step);
  it->second = *std::move(fresh);
}

uint64_t SnapshotWriter::Enqueue(Job job, bool waited) {
  absl::MutexLock lock(&mu_);
  durable_.erase(job.snapshot.step);
  error_.clear();
  QueuedJob queued;
  queued.seq = ++jobs_queued_;
  queued.waited = waited;
  queued.job = std::move(job);
  jobs_.push_back(std::move(queued));
  return jobs_queued_;
}

absl::Status SnapshotWriter::WaitWritten(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  auto done = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_finished_ >= seq; };
  mu_.Await(absl::Condition(&done));
  absl::Status result = absl::UnavailableError("the snapshot writer stopped first");
  if (auto it = waited_results_.find(seq); it != waited_results_.end()) {
    result = std::move(it->second);
    waited_results_.erase(it);
  }
  return result;
}

void SnapshotWriter::WaitIdle() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_.empty() && !writing_; };
  mu_.Await(absl::Condition(&idle));
}

void SnapshotWriter::AddStatus(PsStatusResponse* r) {
  absl::MutexLock lock(&mu_);
  for (int64_t s : durable_) r->add_durable_snapshots(s);
  r->set_error(error_);
}

void SnapshotWriter::WriterLoop() {
  while (true) {
    QueuedJob queued;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !jobs_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (jobs_.empty()) {
        jobs_finished_ = jobs_queued_;  // none left: no wait outlives the writer
        return;
      }
      queued = std::move(jobs_.front());
      jobs_.pop_front();
      if (queued.job.store == nullptr) {
        error_ = absl::StrCat("snapshot of step ", queued.job.snapshot.step,
                              " dropped: its store was found corrupt and replaced");
        last_written_store_ = nullptr;  // no delta may chain to it
        chain_broken_.store(true);
        FinishJobLocked(queued, absl::DataLossError(error_));
        continue;
      }
      writing_ = true;
    }
    const Job& job = queued.job;
    const absl::Time start = absl::Now();
    absl::StatusOr<int64_t> bytes = WriteLinked(job);
    absl::Status pruned = !bytes.ok()              ? absl::OkStatus()
                          : job.retain.has_value() ? job.store->PruneTo(*job.retain, job.snapshot.step)
                                                   : job.store->Prune(job.keep, job.snapshot.step);
    if (!bytes.ok() && bytes.status().code() != absl::StatusCode::kResourceExhausted &&
        bytes.status().code() != absl::StatusCode::kAborted) {  // a delta refused unwritten
      {
        absl::MutexLock lock(&mu_);
        writing_ = false;
      }
      // Corrupt: set aside and salvage; any other failure (a full disk):
      // reopen, as RocksDB keeps a failed write's error for good.
      Replace(job.store, /*salvage=*/bytes.status().code() == absl::StatusCode::kDataLoss,
              /*wait_for_uses=*/true);
    }
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!bytes.ok()) {
      error_ = std::string(bytes.status().message());
      LOG(ERROR) << "snapshot of step " << job.snapshot.step << " failed: " << bytes.status();
      FinishJobLocked(queued, absl::DataLossError(error_));
      continue;
    }
    if (!pruned.ok()) LOG(WARNING) << "pruning old snapshots: " << pruned;
    durable_.clear();
    for (int64_t step : job.store->Steps()) durable_.insert(step);
    // A step still queued may have an older copy on disk (the chief takes
    // the same steps again after a recovery): not durable until its new
    // copy is written, or the chief could commit the stale one.
    for (const QueuedJob& q : jobs_) durable_.erase(q.job.snapshot.step);
    FinishJobLocked(queued, absl::OkStatus());
    double secs = absl::ToDoubleSeconds(absl::Now() - start);
    LOG(INFO) << "snapshot of step " << job.snapshot.step << " durable: " << *bytes << " bytes in "
              << secs << " s (" << (secs > 0 ? *bytes / secs / 1e6 : 0) << " MB/s)";
  }
}

void SnapshotWriter::FinishJobLocked(const QueuedJob& job, absl::Status result) {
  jobs_finished_ = std::max(jobs_finished_, job.seq);
  if (job.waited) waited_results_[job.seq] = std::move(result);
}

absl::StatusOr<int64_t> SnapshotWriter::WriteLinked(const Job& job) {
  absl::StatusOr<int64_t> bytes;
  if (job.snapshot.delta &&
      (job.store != last_written_store_ || job.snapshot.base_step != last_written_step_)) {
    // The rows touched before the base's pause are in no snapshot but the
    // base: without it this delta is worthless.
    bytes = absl::AbortedError(absl::StrCat("snapshot of step ", job.snapshot.step, " not written: it is a delta on step ",
                                            job.snapshot.base_step, ", which was not written; the next snapshot is full"));
  } else {
    bytes = job.store->Write(job.snapshot);
  }
  if (bytes.ok()) {
    last_written_store_ = job.store;
    last_written_step_ = job.snapshot.step;
  } else {
    last_written_store_ = nullptr;
    last_written_step_ = -1;
    chain_broken_.store(true);
  }
  return bytes;
}

}  // namespace psrt
