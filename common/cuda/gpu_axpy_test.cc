#include "common/cuda/gpu_axpy.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace cuda {
namespace {

std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 97) - 3.0f;
  return v;
}

TEST(GpuAxpyTest, CpuTwinComputesAxpy) {
  std::vector<float> x = {1, 2, 3}, y = {10, 20, 30};
  AxpyCpu(0.5f, x.data(), y.data(), 3);
  EXPECT_EQ(y, (std::vector<float>{10.5f, 21.0f, 31.5f}));
  AxpyCpu(2.0f, x.data(), y.data(), 0);  // n = 0 leaves y alone
  EXPECT_EQ(y[0], 10.5f);
}

TEST(GpuAxpyTest, ProbeAlwaysAnswers) {
  GpuProbe p = ProbeGpu();
  if (p.available) {
    EXPECT_GT(p.device_count, 0);
  } else {
    EXPECT_FALSE(p.why_not.empty());
  }
}

TEST(GpuAxpyTest, GpuMatchesCpuTwin) {
  GpuProbe p = ProbeGpu();
  if (!p.available) GTEST_SKIP() << "no GPU: " << p.why_not;
  const int64_t n = (1 << 20) + 3;  // not a multiple of the block size
  std::vector<float> x = Ramp(n, 0.25f), y_cpu = Ramp(n, -0.5f);
  std::vector<float> y_gpu = y_cpu;
  AxpyCpu(1.75f, x.data(), y_cpu.data(), n);
  ASSERT_EQ(AxpyGpu(1.75f, x.data(), y_gpu.data(), n), "");
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y_gpu[i], y_cpu[i], 1e-5f) << i;
}

}  // namespace
}  // namespace cuda
}  // namespace psrt
