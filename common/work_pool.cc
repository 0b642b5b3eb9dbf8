#include "common/work_pool.h"

#include <algorithm>

namespace psrt {

std::unique_ptr<WorkPool> WorkPool::Create(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::unique_ptr<WorkPool>(new WorkPool(threads));
}

WorkPool::WorkPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

WorkPool::~WorkPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

int64_t WorkPool::Parts(int64_t units, int64_t min_part) const {
  const int64_t by_size = units / std::max<int64_t>(1, min_part);
  return std::max<int64_t>(1, std::min<int64_t>(by_size, threads()));
}

int64_t WorkPool::TakeLocked(Batch* batch) {
  if (batch->next >= batch->n) return -1;
  const int64_t i = batch->next++;
  if (batch->next == batch->n) {
    // All taken: no other thread needs to find it any more.
    queue_.erase(std::remove(queue_.begin(), queue_.end(), batch), queue_.end());
  }
  return i;
}

void WorkPool::RunParts(Batch* batch, int64_t i) {
  while (true) {
    (*batch->fn)(i);
    // Finishing a part and taking the next happen under one lock: once
    // the last part is counted the owner may return and free the batch,
    // so nothing here touches it after letting go.
    absl::MutexLock lock(&mu_);
    ++batch->finished;
    i = TakeLocked(batch);
    if (i < 0) return;
  }
}

void WorkPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Batch batch{&fn, n};
  int64_t first;
  {
    absl::MutexLock lock(&mu_);
    if (splitting_ > 0) {
      // Another call has the threads (or this is a part of one): many
      // pushes at once keep the cores busy already, and splitting this
      // one too would only queue it behind them. The caller runs it all.
      mu_.Unlock();
      for (int64_t i = 0; i < n; ++i) fn(i);
      mu_.Lock();
      return;
    }
    ++splitting_;
    queue_.push_back(&batch);
    first = TakeLocked(&batch);
  }
  RunParts(&batch, first);
  // Parts other threads took may still run: wait for them (the batch lives
  // on this stack until every part has finished).
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(+[](Batch* b) { return b->finished == b->n; }, &batch));
  --splitting_;
}

void WorkPool::WorkerLoop() {
  while (true) {
    Batch* batch;
    int64_t i;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      batch = queue_.front();  // fully taken batches leave the queue
      i = TakeLocked(batch);
    }
    RunParts(batch, i);
  }
}

}  // namespace psrt
