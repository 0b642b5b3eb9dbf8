// The whole MLP example (examples/fashion_mnist_mlp.pbtxt, compiled with
// autodiff) on the GPU executor against the CPU executor: one step's loss,
// metrics and every gradient agree, and device memory is reused across
// steps. Skipped where there is no GPU or CUDA was not built in.
#include <cmath>

#include "common/cuda/gpu_axpy.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"
#include "common/compute/executor.h"
#include "worker/gpu/gpu_executor.h"
#include "worker/gpu/graph_fixture.h"

namespace psrt {
namespace {

TEST(GpuExecutorTest, MlpStepMatchesCpu) {
  cuda::GpuProbe probe = cuda::ProbeGpu();
  if (!probe.available) GTEST_SKIP() << "no GPU: " << probe.why_not;
  auto compiled = CompileJobFile(testing::RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const CompiledModel* model = &compiled->model;
  const std::vector<std::string>& fetches = compiled->fetches;

  auto cpu = Executor::Create(model->graph, ExecutorOptions{2});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = GpuExecutor::Create(model->graph);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_NE((*gpu)->device_name().find("gpu:0"), std::string::npos);

  auto feeds = RandomFeeds(model->graph, 128, compiled->job.input().num_classes(), 7);
  // Training off: dropout passes through on both (their masks come from
  // different generators); the gradient graph still runs in full.
  auto want = (*cpu)->Run(feeds, fetches, 3, false);
  ASSERT_TRUE(want.ok()) << want.status();
  gpu::PoolStats after_first;
  for (int step = 0; step < 3; ++step) {
    auto got = (*gpu)->Run(feeds, fetches, 3, false);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t f = 0; f < fetches.size(); ++f) {
      const Tensor& a = (*want)[f];
      const Tensor& b = (*got)[f];
      ASSERT_EQ(a.shape(), b.shape()) << fetches[f];
      for (int64_t i = 0; i < a.NumElements(); ++i) {
        float x = a.data<float>()[i], y = b.data<float>()[i];
        ASSERT_NEAR(x, y, 1e-4f + 1e-3f * std::fabs(x)) << fetches[f] << "[" << i << "]";
      }
    }
    if (step == 0) after_first = (*gpu)->pool_stats();
  }
  gpu::PoolStats after = (*gpu)->pool_stats();
  EXPECT_EQ(after.allocations, after_first.allocations) << "later steps allocated device memory";
  EXPECT_GT(after.reuses, after_first.reuses);

  // Training on: dropout runs on the GPU, and the loss stays sane.
  auto trained = (*gpu)->Run(feeds, fetches, 3, true);
  ASSERT_TRUE(trained.ok()) << trained.status();
  float loss = (*trained)[0].data<float>()[0];
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0f);
}

}  // namespace
}  // namespace psrt
