// BufferPool: reuses tensor storage on the hot path, so a push or pull of a
// large tensor does not pay for a fresh allocation each time (for large
// sizes malloc maps fresh pages, and touching them costs a page fault per
// 4 KiB, often more than the copy itself).
//
// Buffers come back to the pool when their last reference goes (the
// TensorBuffer releaser), e.g. when gRPC is done sending a pulled tensor's
// slice. Sizes are rounded up to a 4 KiB multiple and reused only for the
// same rounded size: a parameter server sees the same few sizes again and
// again. Buffers under `min_bytes` are plain allocations. The pool keeps at
// most `max_cached_bytes` idle; the rest is freed.
//
//   auto pool = BufferPool::Create({});
//   Tensor t(DT_FLOAT, shape, pool->Allocate(bytes));
//   reader.set_allocator(pool->Allocator());
//
// Thread-safe. Buffers may outlive the BufferPool object (the shared state
// lives until the last buffer is released).
#ifndef PSRT_COMMON_BUFFER_POOL_H_
#define PSRT_COMMON_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/tensor.h"

namespace psrt {

struct BufferPoolOptions {
  size_t min_bytes = 64 << 10;
  size_t max_cached_bytes = size_t{1} << 30;
};

struct BufferPoolStats {
  int64_t hits = 0;
  int64_t misses = 0;  // fresh allocations of poolable sizes
  size_t cached_bytes = 0;
};

class BufferPool {
 public:
  static std::shared_ptr<BufferPool> Create(BufferPoolOptions options = {});
  ~BufferPool();

  // 64-byte aligned, contents uninitialised, size() == bytes.
  std::shared_ptr<TensorBuffer> Allocate(size_t bytes);
  // The same, or null where the memory cannot be had (Allocate aborts):
  // for sizes a peer named.
  std::shared_ptr<TensorBuffer> TryAllocate(size_t bytes);
  // Allocate as a function, for wire::Reader::set_allocator.
  std::function<std::shared_ptr<TensorBuffer>(size_t)> Allocator();
  // A deep copy of `t` in pooled storage.
  Tensor Copy(const Tensor& t);
  BufferPoolStats stats() const;
  // Frees idle buffers, largest first, until at most `keep_bytes` are
  // idle; returns the bytes freed. For a server whose traffic just fell
  // (a connection closed): the pool's bound is for steady traffic, and
  // memory a burst left idle goes back.
  size_t Trim(size_t keep_bytes);

  struct State;

 private:
  explicit BufferPool(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_BUFFER_POOL_H_
