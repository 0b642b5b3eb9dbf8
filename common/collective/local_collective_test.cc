#include "common/collective/local_collective.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/time/clock.h"
#include "common/collective/collective_testing.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using testing::OnEachRank;

float Value(int rank, size_t i) { return std::sin(0.37f * i + rank) * (rank + 1) * 1000.0f; }

TEST(LocalCollectiveTest, AllReduceSumsInRankOrderOnEveryRank) {
  for (int N : {1, 2, 3, 4}) {
    auto ranks = LocalCollectiveGroup::Create(N);
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{1} << 20}) {
      std::vector<std::vector<float>> data(N, std::vector<float>(n));
      for (int r = 0; r < N; ++r)
        for (size_t i = 0; i < n; ++i) data[r][i] = Value(r, i);
      const std::vector<std::vector<float>> in = data;
      auto st = OnEachRank(N, [&](int r) { return ranks[r]->AllReduceSum(data[r].data(), n); });
      for (int r = 0; r < N; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r];
        ASSERT_TRUE(n == 0 || std::memcmp(data[0].data(), data[r].data(), n * sizeof(float)) == 0);
      }
      for (size_t i = 0; i < n; ++i) {
        float sum = in[0][i];
        for (int r = 1; r < N; ++r) sum += in[r][i];
        ASSERT_EQ(data[0][i], sum) << "N=" << N << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(LocalCollectiveTest, Broadcast) {
  auto ranks = LocalCollectiveGroup::Create(3);
  for (int root = 0; root < 3; ++root) {
    std::vector<std::vector<float>> data(3, std::vector<float>(5));
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < 5; ++i) data[r][i] = Value(r, i);
    const std::vector<float> expect = data[root];
    auto st = OnEachRank(3, [&](int r) { return ranks[r]->Broadcast(data[r].data(), 5, root); });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      EXPECT_EQ(data[r], expect);
    }
  }
  float x;
  EXPECT_EQ(ranks[0]->Broadcast(&x, 1, 3).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LocalCollectiveTest, MissingRankIsDeadlineExceededAndBreaksTheGroup) {
  const absl::Duration timeout = absl::Milliseconds(300);
  auto ranks = LocalCollectiveGroup::Create(3, timeout);
  std::vector<float> a(10), b(10);
  absl::Time start = absl::Now();
  auto st = OnEachRank(2, [&](int r) { return ranks[r]->AllReduceSum(r == 0 ? a.data() : b.data(), 10); });
  EXPECT_GE(absl::Now() - start, timeout * 0.9);
  EXPECT_LT(absl::Now() - start, timeout * 5);
  for (auto& s : st) EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  // The late rank, and every later call, fails at once.
  EXPECT_EQ(ranks[2]->AllReduceSum(a.data(), 10).code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(LocalCollectiveTest, AbortWakesWaitingRanks) {
  auto ranks = LocalCollectiveGroup::Create(3, absl::Seconds(30));
  std::vector<float> a(10), b(10);
  absl::Time start = absl::Now();
  std::vector<absl::Status> st(2);
  std::thread t([&] { st[0] = ranks[0]->AllReduceSum(a.data(), 10); });
  std::thread u([&] { st[1] = ranks[1]->AllReduceSum(b.data(), 10); });
  ranks[2]->Abort();
  t.join();
  u.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (auto& s : st) EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

TEST(LocalCollectiveTest, MismatchedSizesFail) {
  auto ranks = LocalCollectiveGroup::Create(2, absl::Seconds(5));
  std::vector<float> a(10), b(11);
  auto st = OnEachRank(2, [&](int r) { return r == 0 ? ranks[0]->AllReduceSum(a.data(), 10)
                                                     : ranks[1]->AllReduceSum(b.data(), 11); });
  EXPECT_EQ(st[0].code(), absl::StatusCode::kInvalidArgument) << st[0];
  EXPECT_EQ(st[1].code(), absl::StatusCode::kInvalidArgument) << st[1];
}

}  // namespace
}  // namespace psrt
