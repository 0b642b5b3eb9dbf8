// The pool's bookkeeping, on a fake allocator (no GPU needed).
#include "worker/gpu/caching_pool.h"

#include <cstdlib>
#include <set>

#include "gtest/gtest.h"

namespace psrt {
namespace gpu {
namespace {

// Hands out malloc'ed blocks, counts calls, and can be told to fail once
// more than `limit` bytes are live.
struct FakeAllocator {
  struct State {
    int allocs = 0, frees = 0;
    size_t live = 0, limit = SIZE_MAX;
    std::set<void*> blocks;
  };
  State* state;
  void* Allocate(size_t bytes, std::string* error) {
    if (state->live + bytes > state->limit) {
      *error = "out of memory";
      return nullptr;
    }
    void* p = std::malloc(bytes);
    ++state->allocs;
    state->live += bytes;
    state->blocks.insert(p);
    sizes[p] = bytes;
    return p;
  }
  void Free(void* p) {
    ++state->frees;
    state->live -= sizes[p];
    state->blocks.erase(p);
    std::free(p);
  }
  std::map<void*, size_t> sizes;
};

using Pool = CachingPool<FakeAllocator>;

TEST(CachingPoolTest, RoundsToGranules) {
  EXPECT_EQ(Pool::RoundUp(0), 256u);
  EXPECT_EQ(Pool::RoundUp(1), 256u);
  EXPECT_EQ(Pool::RoundUp(256), 256u);
  EXPECT_EQ(Pool::RoundUp(257), 512u);
}

TEST(CachingPoolTest, StepsAfterTheFirstAllocateNothing) {
  FakeAllocator::State st;
  {
    Pool pool(FakeAllocator{&st});
    const std::vector<size_t> step = {4000, 100, 4000, 65536, 3};  // sizes one step asks for
    for (int s = 0; s < 5; ++s) {
      std::vector<std::pair<void*, size_t>> held;
      for (size_t bytes : step) {
        size_t block;
        std::string error;
        void* p = pool.Allocate(bytes, &block, &error);
        ASSERT_NE(p, nullptr) << error;
        EXPECT_GE(block, bytes);
        held.emplace_back(p, block);
      }
      for (auto [p, block] : held) pool.Release(p, block);
    }
    PoolStats stats = pool.stats();
    EXPECT_EQ(stats.allocations, 5);  // the first step only
    EXPECT_EQ(stats.reuses, 20);
    EXPECT_EQ(stats.bytes_in_use, 0u);
    EXPECT_EQ(stats.bytes_cached, st.live);
    EXPECT_EQ(st.allocs, 5);
    EXPECT_EQ(st.frees, 0);
  }
  EXPECT_EQ(st.frees, 5);  // destroying the pool gives every cached block back
  EXPECT_EQ(st.live, 0u);
}

TEST(CachingPoolTest, AReleasedBlockIsReusedForTheSameSizeOnly) {
  FakeAllocator::State st;
  Pool pool(FakeAllocator{&st});
  size_t block;
  std::string error;
  void* a = pool.Allocate(1000, &block, &error);
  pool.Release(a, block);
  void* b = pool.Allocate(1024, &block, &error);  // same 1024-byte granule
  EXPECT_EQ(a, b);
  void* c = pool.Allocate(1000, &block, &error);  // a is in use: a new block
  EXPECT_NE(c, b);
  void* d = pool.Allocate(5000, &block, &error);
  EXPECT_NE(d, b);
  EXPECT_EQ(st.allocs, 3);
  pool.Release(b, 1024);
  pool.Release(c, 1024);
  pool.Release(d, block);
  pool.Trim();
  EXPECT_EQ(st.live, 0u);
  EXPECT_EQ(pool.stats().bytes_cached, 0u);
}

TEST(CachingPoolTest, OutOfMemoryEmptiesTheCacheAndRetries) {
  FakeAllocator::State st;
  st.limit = 4096;
  Pool pool(FakeAllocator{&st});
  size_t block;
  std::string error;
  void* a = pool.Allocate(3000, &block, &error);
  ASSERT_NE(a, nullptr);
  pool.Release(a, block);  // cached, still counted as live by the allocator
  void* b = pool.Allocate(2000, &block, &error);  // needs the cached block freed
  ASSERT_NE(b, nullptr) << error;
  EXPECT_EQ(st.frees, 1);
  void* c = pool.Allocate(4000, &block, &error);  // does not fit at all
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(error, "out of memory");
  pool.Release(b, 2048);
}

}  // namespace
}  // namespace gpu
}  // namespace psrt
