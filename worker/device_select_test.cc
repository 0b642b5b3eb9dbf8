#include "worker/device_select.h"

#include "common/cuda/gpu_axpy.h"
#include "common/graph/graph_builder.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(DeviceSelectTest, CpuIsAlwaysThere) {
  auto d = ChooseDevice("cpu");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->gpu);
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "x", {}, {{"shape", AttrShape({2})}, {"dtype", AttrType(DT_FLOAT)}});
  std::string y = b.Add("Relu", "y", {"x"});
  auto e = CreateStepExecutor(g, *d);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->device_name(), "cpu");
  auto out = (*e)->Run({{"x", Tensor::FromVector<float>({-1, 2}, TensorShape({2}))}}, {y}, 0, true);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].data<float>()[1], 2.0f);
}

TEST(DeviceSelectTest, AutoFollowsTheProbeAndGpuNeedsOne) {
  cuda::GpuProbe probe = cuda::ProbeGpu();
  auto a = ChooseDevice("auto");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->gpu, probe.available);
  EXPECT_FALSE(a->reason.empty());
  auto g = ChooseDevice("gpu");
  if (probe.available) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(g->gpu);
  } else {
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(g.status().message().find(probe.why_not), std::string::npos) << g.status();
  }
}

// Mirrored replicas use NCCL only when each has a GPU of its own.
TEST(DeviceSelectTest, MirroredReplicasMapOntoGpus) {
  DeviceChoice cpu;
  MirroredLayout l = LayoutMirrored(cpu, 3);
  EXPECT_FALSE(l.nccl);
  EXPECT_EQ(l.ordinal, std::vector<int>({0, 0, 0}));
  DeviceChoice four;
  four.gpu = true;
  four.gpus = 4;
  l = LayoutMirrored(four, 4);
  EXPECT_TRUE(l.nccl);
  EXPECT_EQ(l.ordinal, std::vector<int>({0, 1, 2, 3}));
  EXPECT_FALSE(LayoutMirrored(four, 1).nccl);  // one replica: nothing to reduce
  DeviceChoice two = four;
  two.gpus = 2;
  l = LayoutMirrored(two, 3);
  EXPECT_FALSE(l.nccl);
  EXPECT_EQ(l.ordinal, std::vector<int>({0, 1, 0}));
  EXPECT_NE(l.why.find("round-robin"), std::string::npos) << l.why;
}

TEST(DeviceSelectTest, RejectsOtherValues) {
  auto d = ChooseDevice("tpu");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psrt
