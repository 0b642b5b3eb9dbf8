#include "common/buffer_pool.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(BufferPoolTest, ReusesReleasedBuffersOfTheSameSize) {
  auto pool = BufferPool::Create({});
  void* first;
  {
    auto b = pool->Allocate(1 << 20);
    first = b->data();
    EXPECT_EQ(b->size(), size_t{1} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % kTensorAlignment, 0u);
  }
  auto again = pool->Allocate((1 << 20) - 100);  // same 4 KiB-rounded size
  EXPECT_EQ(again->data(), first);
  auto other = pool->Allocate(2 << 20);
  EXPECT_NE(other->data(), first);
  EXPECT_EQ(pool->stats().hits, 1);
  EXPECT_EQ(pool->stats().misses, 2);
}

TEST(BufferPoolTest, SmallBuffersAndTheCacheLimitBypassThePool) {
  BufferPoolOptions o;
  o.max_cached_bytes = 1 << 20;
  auto pool = BufferPool::Create(o);
  { auto small = pool->Allocate(100); }
  EXPECT_EQ(pool->stats().misses, 0);
  {
    auto a = pool->Allocate(1 << 20);
    auto b = pool->Allocate(1 << 20);
  }
  EXPECT_EQ(pool->stats().cached_bytes, size_t{1} << 20);  // one kept, one freed
}

// Trim gives back idle buffers past a bound, largest first; buffers in
// use are untouched and come back to the pool as before.
TEST(BufferPoolTest, TrimFreesIdleBuffersPastTheBoundLargestFirst) {
  auto pool = BufferPool::Create({});
  auto in_use = pool->Allocate(8 << 20);
  {
    auto a = pool->Allocate(1 << 20);
    auto b = pool->Allocate(4 << 20);
    auto c = pool->Allocate(16 << 20);
  }
  EXPECT_EQ(pool->stats().cached_bytes, size_t{21} << 20);
  EXPECT_EQ(pool->Trim(size_t{5} << 20), size_t{16} << 20);
  EXPECT_EQ(pool->stats().cached_bytes, size_t{5} << 20);
  EXPECT_EQ(pool->Trim(0), size_t{5} << 20);
  EXPECT_EQ(pool->stats().cached_bytes, 0u);
  in_use.reset();
  EXPECT_EQ(pool->stats().cached_bytes, size_t{8} << 20);
}

TEST(BufferPoolTest, BuffersOutliveThePoolAndCopyIsDeep) {
  Tensor t;
  {
    auto pool = BufferPool::Create({});
    Tensor src = Tensor::Zeros(DT_FLOAT, TensorShape({1 << 16}));
    src.data<float>()[7] = 3;
    t = pool->Copy(src);
    src.data<float>()[7] = 4;
  }
  EXPECT_EQ(t.data<float>()[7], 3);  // the pool is gone; the buffer is not
}

TEST(BufferPoolTest, ConcurrentUse) {
  auto pool = BufferPool::Create({});
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        auto b = pool->Allocator()(256 << 10);
        static_cast<char*>(b->data())[0] = 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(pool->stats().hits + pool->stats().misses, 800);
  EXPECT_LE(pool->stats().misses, 4);
}

// Sizes a peer names: a buffer that cannot be had is null, not an abort.
TEST(BufferPoolTest, TryAllocateAnswersNullWhereTheMemoryCannotBeHad) {
  auto pool = BufferPool::Create({});
  EXPECT_EQ(pool->TryAllocate(SIZE_MAX), nullptr);
  EXPECT_EQ(pool->TryAllocate(size_t{1} << 62), nullptr);
  auto b = pool->TryAllocate(1 << 20);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size(), size_t{1} << 20);
  EXPECT_NE(pool->TryAllocate(100), nullptr);  // under min_bytes: a plain allocation
}

}  // namespace
}  // namespace psrt
