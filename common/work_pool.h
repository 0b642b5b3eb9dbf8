// WorkPool: a small fixed set of threads that run the parts of one job in
// parallel, with the calling thread taking part. The parameter server
// applies the optimizer through it: across the variables of one push and
// across row ranges of a large variable.
//
// ParallelFor(n, fn) runs fn(0) .. fn(n-1), each once, and returns when all
// have run. The caller runs parts itself while it waits.
// With one thread (or n <= 1), or while another call is split over the
// threads (concurrent callers keep the cores busy already; a call from
// inside a part runs on its thread too), everything runs on the calling
// thread, in order.
//
// Thread-safe; the destructor joins the threads (no ParallelFor may be
// running then).
//
//   std::unique_ptr<WorkPool> pool = WorkPool::Create(0);  // one per core
//   pool->ParallelFor(chunks, [&](int64_t i) { Apply(begin[i], end[i]); });
#ifndef PSRT_COMMON_WORK_POOL_H_
#define PSRT_COMMON_WORK_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace psrt {

class WorkPool {
 public:
  // `threads` in all, the caller included (threads - 1 are started);
  // 0 = one per core (std::thread::hardware_concurrency).
  static std::unique_ptr<WorkPool> Create(int threads);
  ~WorkPool();

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // REQUIRES: fn may be called from any thread of the pool, concurrently
  // for different i.
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

  // Parts of about `min_part` or more units each, at most threads() of
  // them, covering `units`: how many parts to split a job of `units` into
  // so that no part is too small to be worth a thread. At least 1.
  int64_t Parts(int64_t units, int64_t min_part) const;

 private:
  struct Batch {
    const std::function<void(int64_t)>* fn;
    int64_t n;
    int64_t next = 0;      // the next part nobody has taken (guarded by mu_)
    int64_t finished = 0;  // parts run (guarded by mu_)
  };

  explicit WorkPool(int threads);
  // Calls split over the threads now (0 or 1).
  int splitting_ ABSL_GUARDED_BY(mu_) = 0;
  // The next part of `batch` nobody has taken, now taken; -1 if none.
  int64_t TakeLocked(Batch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs part i (already taken), then takes and runs more of `batch` until
  // none is left.
  void RunParts(Batch* batch, int64_t i) ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLoop();

  std::vector<std::thread> workers_;

  absl::Mutex mu_;
  // Batches with parts nobody has taken yet, oldest first.
  std::deque<Batch*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace psrt

#endif  // PSRT_COMMON_WORK_POOL_H_
