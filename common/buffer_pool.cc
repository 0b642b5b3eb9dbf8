#include "common/buffer_pool.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace psrt {
namespace {

constexpr size_t kPage = 4096;

size_t RoundUp(size_t bytes) { return bytes == 0 ? kPage : (bytes + kPage - 1) / kPage * kPage; }

}  // namespace

struct BufferPool::State {
  explicit State(BufferPoolOptions o) : options(o) {}
  ~State() {
    for (auto& [size, list] : free) {
      for (void* p : list) std::free(p);
    }
  }

  const BufferPoolOptions options;
  mutable absl::Mutex mu;
  std::map<size_t, std::vector<void*>> free ABSL_GUARDED_BY(mu);
  BufferPoolStats stats ABSL_GUARDED_BY(mu);
};

std::shared_ptr<BufferPool> BufferPool::Create(BufferPoolOptions options) {
  return std::shared_ptr<BufferPool>(new BufferPool(std::make_shared<State>(options)));
}

BufferPool::~BufferPool() = default;

std::shared_ptr<TensorBuffer> BufferPool::Allocate(size_t bytes) {
  std::shared_ptr<TensorBuffer> b = TryAllocate(bytes);
  CHECK(b != nullptr) << "out of memory allocating " << bytes << " bytes";
  return b;
}

std::shared_ptr<TensorBuffer> BufferPool::TryAllocate(size_t bytes) {
  if (bytes < state_->options.min_bytes) return TensorBuffer::TryAllocate(bytes);
  if (bytes > SIZE_MAX - kPage) return nullptr;
  const size_t rounded = RoundUp(bytes);
  void* p = nullptr;
  {
    absl::MutexLock lock(&state_->mu);
    auto it = state_->free.find(rounded);
    if (it != state_->free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      state_->stats.cached_bytes -= rounded;
      ++state_->stats.hits;
    } else {
      ++state_->stats.misses;
    }
  }
  if (p == nullptr) {
    p = std::aligned_alloc(kPage, rounded);
    if (p == nullptr) return nullptr;
  }
  // The releaser holds the state, so buffers may outlive the pool object.
  return std::make_shared<TensorBuffer>(p, bytes, [state = state_, rounded](void* q) {
    {
      absl::MutexLock lock(&state->mu);
      if (state->stats.cached_bytes + rounded <= state->options.max_cached_bytes) {
        state->free[rounded].push_back(q);
        state->stats.cached_bytes += rounded;
        return;
      }
    }
    std::free(q);
  });
}

std::function<std::shared_ptr<TensorBuffer>(size_t)> BufferPool::Allocator() {
  return [state = state_](size_t bytes) { return BufferPool(state).Allocate(bytes); };
}

Tensor BufferPool::Copy(const Tensor& t) {
  if (!t.IsValid()) return Tensor();
  Tensor out(t.dtype(), t.shape(), Allocate(t.TotalBytes()));
  std::memcpy(out.raw_data(), t.raw_data(), t.TotalBytes());
  return out;
}

size_t BufferPool::Trim(size_t keep_bytes) {
  std::vector<void*> drop;
  size_t freed = 0;
  {
    absl::MutexLock lock(&state_->mu);
    for (auto it = state_->free.rbegin(); it != state_->free.rend() && state_->stats.cached_bytes > keep_bytes; ++it) {
      while (!it->second.empty() && state_->stats.cached_bytes > keep_bytes) {
        drop.push_back(it->second.back());
        it->second.pop_back();
        state_->stats.cached_bytes -= it->first;
        freed += it->first;
      }
    }
  }
  for (void* p : drop) std::free(p);
  return freed;
}

BufferPoolStats BufferPool::stats() const {
  absl::MutexLock lock(&state_->mu);
  return state_->stats;
}

}  // namespace psrt
