#include "common/work_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(WorkPoolTest, RunsEveryPartOnce) {
  std::unique_ptr<WorkPool> pool = WorkPool::Create(4);
  ASSERT_EQ(pool->threads(), 4);
  for (int64_t n : {0, 1, 2, 3, 7, 100, 1000}) {
    std::vector<std::atomic<int>> runs(n);
    pool->ParallelFor(n, [&](int64_t i) { runs[i].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << "part " << i << " of " << n;
  }
}

TEST(WorkPoolTest, PartsRunConcurrently) {
  // Part 0 (the caller's) waits for part 1 to start: it can only finish if
  // another thread of the pool runs part 1 meanwhile.
  std::unique_ptr<WorkPool> pool = WorkPool::Create(2);
  absl::Mutex mu;
  bool started = false;
  bool saw_other = false;
  std::set<std::thread::id> threads;
  pool->ParallelFor(2, [&](int64_t i) {
    absl::MutexLock lock(&mu);
    threads.insert(std::this_thread::get_id());
    if (i == 1) {
      started = true;
      return;
    }
    saw_other = mu.AwaitWithTimeout(absl::Condition(&started), absl::Seconds(30));
  });
  EXPECT_TRUE(saw_other);
  EXPECT_EQ(threads.size(), 2u);
}

TEST(WorkPoolTest, NestedCallsFinishOnTheirPartsThread) {
  // A part that itself splits its work (a push's variable in row ranges)
  // runs it on its own thread: it never waits on threads that wait on it.
  std::unique_ptr<WorkPool> pool = WorkPool::Create(3);
  std::atomic<int64_t> sum{0};
  std::atomic<int> elsewhere{0};
  pool->ParallelFor(8, [&](int64_t i) {
    const std::thread::id part = std::this_thread::get_id();
    pool->ParallelFor(50, [&](int64_t j) {
      if (std::this_thread::get_id() != part) elsewhere.fetch_add(1);
      sum.fetch_add(i * 100 + j);
    });
  });
  int64_t want = 0;
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 50; ++j) want += i * 100 + j;
  }
  EXPECT_EQ(sum.load(), want);
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(WorkPoolTest, ABusyPoolRunsANewCallOnItsCaller) {
  std::unique_ptr<WorkPool> pool = WorkPool::Create(2);
  absl::Mutex mu;
  int running = 0;
  bool release = false;
  std::thread first([&] {
    // Parts 0 and 1 hold both threads; part 2 waits in the queue.
    pool->ParallelFor(3, [&](int64_t) {
      absl::MutexLock lock(&mu);
      ++running;
      mu.Await(absl::Condition(&release));
    });
  });
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(+[](int* r) { return *r == 2; }, &running),
                                    absl::Seconds(30)));
  }
  std::set<std::thread::id> threads;
  pool->ParallelFor(4, [&](int64_t) { threads.insert(std::this_thread::get_id()); });
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  first.join();
  EXPECT_EQ(running, 3);
}

TEST(WorkPoolTest, OneThreadRunsInOrderOnTheCaller) {
  std::unique_ptr<WorkPool> pool = WorkPool::Create(1);
  std::vector<int64_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  pool->ParallelFor(5, [&](int64_t i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(WorkPoolTest, PartsOfAJob) {
  std::unique_ptr<WorkPool> pool = WorkPool::Create(4);
  EXPECT_EQ(pool->Parts(10, 100), 1);       // too small to split
  EXPECT_EQ(pool->Parts(250, 100), 2);      // two parts of at least 100
  EXPECT_EQ(pool->Parts(1 << 20, 100), 4);  // no more than the threads
  EXPECT_EQ(pool->Parts(0, 0), 1);
}

}  // namespace
}  // namespace psrt
