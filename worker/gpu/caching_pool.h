// CachingPool: device memory reused across steps.
//
// cudaMalloc and cudaFree are slow and synchronise the device, so freed
// blocks go on a free list keyed by their (rounded) size instead, and the
// next request of that size takes one back. A training step asks for the
// same sizes in the same order every time, so from the second step on it
// allocates nothing. Cached blocks go back to the allocator when the pool
// is destroyed (with its executor), on Trim(), and once when an allocation
// fails (then it is retried).
//
// Templated on the allocator so the bookkeeping is tested on the CPU:
//   struct Allocator {
//     void* Allocate(size_t bytes, std::string* error);  // nullptr on failure
//     void Free(void* p);
//   };
//
// Reusing a block on another stream would need an event; the GPU executor
// runs everything on one stream, where a block released after its last
// kernel was queued can be handed to the next kernel safely (stream order).
#ifndef PSRT_WORKER_GPU_CACHING_POOL_H_
#define PSRT_WORKER_GPU_CACHING_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace psrt {
namespace gpu {

struct PoolStats {
  int64_t allocations = 0;  // blocks taken from the allocator
  int64_t reuses = 0;       // requests served from a free list
  int64_t frees = 0;        // blocks given back to the allocator
  size_t bytes_in_use = 0;
  size_t bytes_cached = 0;  // on free lists
  size_t peak_bytes = 0;    // in use + cached, at most
};

template <typename Allocator>
class CachingPool {
 public:
  // cudaMalloc aligns to 256 bytes; rounding to it costs nothing and lets
  // nearby sizes share a free list. Zero-byte requests get a real block, so
  // every tensor has a distinct non-null address.
  static constexpr size_t kGranule = 256;
  static size_t RoundUp(size_t bytes) {
    return bytes == 0 ? kGranule : (bytes + kGranule - 1) / kGranule * kGranule;
  }

  explicit CachingPool(Allocator alloc = Allocator()) : alloc_(std::move(alloc)) {}
  ~CachingPool() { Trim(); }
  CachingPool(const CachingPool&) = delete;
  CachingPool& operator=(const CachingPool&) = delete;

  // A block of at least `bytes`; *block_size is what to pass to Release.
  // nullptr (with *error) when the allocator fails even after the cache was
  // emptied.
  void* Allocate(size_t bytes, size_t* block_size, std::string* error) {
    const size_t size = RoundUp(bytes);
    *block_size = size;
    std::lock_guard<std::mutex> l(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= size;
      stats_.bytes_in_use += size;
      ++stats_.reuses;
      return p;
    }
    void* p = alloc_.Allocate(size, error);
    if (p == nullptr && stats_.bytes_cached > 0) {  // memory held by other sizes: give it back, retry
      TrimLocked();
      p = alloc_.Allocate(size, error);
    }
    if (p == nullptr) return nullptr;
    ++stats_.allocations;
    stats_.bytes_in_use += size;
    if (stats_.bytes_in_use + stats_.bytes_cached > stats_.peak_bytes) {
      stats_.peak_bytes = stats_.bytes_in_use + stats_.bytes_cached;
    }
    return p;
  }

  void Release(void* p, size_t block_size) {
    std::lock_guard<std::mutex> l(mu_);
    free_[block_size].push_back(p);
    stats_.bytes_in_use -= block_size;
    stats_.bytes_cached += block_size;
  }

  // Every cached block back to the allocator; blocks in use are untouched.
  void Trim() {
    std::lock_guard<std::mutex> l(mu_);
    TrimLocked();
  }

  PoolStats stats() const {
    std::lock_guard<std::mutex> l(mu_);
    return stats_;
  }

 private:
  void TrimLocked() {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) {
        alloc_.Free(p);
        ++stats_.frees;
      }
    }
    free_.clear();
    stats_.bytes_cached = 0;
  }

  mutable std::mutex mu_;
  Allocator alloc_;
  std::map<size_t, std::vector<void*>> free_;
  PoolStats stats_;
};

}  // namespace gpu
}  // namespace psrt

#endif  // PSRT_WORKER_GPU_CACHING_POOL_H_
