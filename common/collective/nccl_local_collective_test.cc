#include "common/collective/nccl_local_collective.h"

#include <cmath>
#include <cstring>
#include <thread>

#include "absl/time/clock.h"
#include "common/collective/collective_testing.h"
#include "common/cuda/gpu_axpy.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using testing::OnEachRank;

float Value(int rank, size_t i) { return std::sin(0.37f * i + rank) * (rank + 1) * 1000.0f; }

int VisibleGpus() {
  cuda::GpuProbe p = cuda::ProbeGpu();
  return p.available ? p.device_count : 0;
}

// What the worker relies on to fall back to the CPU group.
TEST(NcclLocalGroupTest, WithoutEnoughGpusCreateIsFailedPreconditionSayingWhy) {
  const int gpus = VisibleGpus();
  absl::StatusOr<std::vector<std::unique_ptr<Collective>>> g = NcclLocalGroup::Create(gpus + 1);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition) << g.status();
  EXPECT_NE(g.status().message().find("NCCL"), absl::string_view::npos) << g.status();
  EXPECT_EQ(NcclLocalGroup::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclLocalGroupTest, AllReduceGivesEveryRankTheSameSum) {
  const int gpus = VisibleGpus();
  if (gpus == 0) GTEST_SKIP() << "no GPU: " << cuda::ProbeGpu().why_not;
  for (int N = 1; N <= std::min(gpus, 4); ++N) {
    auto ranks = NcclLocalGroup::Create(N);
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 22, size_t{7}}) {
      std::vector<std::vector<float>> data(N, std::vector<float>(n));
      for (int r = 0; r < N; ++r)
        for (size_t i = 0; i < n; ++i) data[r][i] = Value(r, i);
      const std::vector<std::vector<float>> in = data;
      auto st = OnEachRank(N, [&](int r) { return (*ranks)[r]->AllReduceSum(data[r].data(), n); });
      for (int r = 0; r < N; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r];
        ASSERT_TRUE(n == 0 || std::memcmp(data[0].data(), data[r].data(), n * sizeof(float)) == 0) << "rank " << r;
      }
      for (size_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int r = 0; r < N; ++r) sum += in[r][i];
        ASSERT_NEAR(data[0][i], sum, 1e-3 * (1 + std::fabs(sum))) << "N=" << N << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(NcclLocalGroupTest, BroadcastAndBadRoot) {
  const int gpus = VisibleGpus();
  if (gpus == 0) GTEST_SKIP() << "no GPU: " << cuda::ProbeGpu().why_not;
  const int N = std::min(gpus, 4);
  auto ranks = NcclLocalGroup::Create(N);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  for (int root = 0; root < N; ++root) {
    std::vector<std::vector<float>> data(N, std::vector<float>(5));
    for (int r = 0; r < N; ++r)
      for (size_t i = 0; i < 5; ++i) data[r][i] = Value(r, i);
    const std::vector<float> expect = data[root];
    auto st = OnEachRank(N, [&](int r) { return (*ranks)[r]->Broadcast(data[r].data(), 5, root); });
    for (int r = 0; r < N; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      EXPECT_EQ(data[r], expect);
    }
  }
  float x = 0;
  EXPECT_EQ((*ranks)[0]->Broadcast(&x, 1, N).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclLocalGroupTest, MissingRankIsDeadlineExceededAndBreaksTheGroup) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  auto ranks = NcclLocalGroup::Create(2, absl::Milliseconds(500));
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  std::vector<float> data(1000, 1.0f);
  const absl::Time start = absl::Now();
  absl::Status s = (*ranks)[0]->AllReduceSum(data.data(), data.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // Broken: the other rank fails at once rather than waiting for a partner.
  EXPECT_FALSE((*ranks)[1]->AllReduceSum(data.data(), data.size()).ok());
}

TEST(NcclLocalGroupTest, AbortFromAnotherThreadEndsTheCall) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  auto ranks = NcclLocalGroup::Create(2, absl::Seconds(30));
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  std::vector<float> data(1000, 1.0f);
  // Before or during the call, Abort gives ABORTED (never the 30 s deadline).
  std::thread aborter([&] { (*ranks)[1]->Abort(); });
  absl::Status s = (*ranks)[0]->AllReduceSum(data.data(), data.size());
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
}

}  // namespace
}  // namespace psrt
