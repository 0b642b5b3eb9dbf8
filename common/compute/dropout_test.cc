// The CPU Dropout kernel: its mask is a counter-based draw of (seed, node,
// element), the same on every run and on the GPU (worker/gpu's kernel
// test compares the bits), keeping 1 - rate of the elements at 1/(1-rate).
#include <random>

#include "common/compute/executor.h"
#include "common/compute/op_test_util.h"
#include "common/graph/graph_builder.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(DropoutTest, KeepsTheRateAtTheScaleAndASeedGivesOneMask) {
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "x", {}, {{"shape", AttrShape({200, 500})}, {"dtype", AttrType(DT_FLOAT)}});
  const std::string y = b.Add("Dropout", "drop", {"x"}, {{"rate", AttrF(0.3f)}});
  const std::string mask = TensorName(ParseTensorName(y).first, 1);
  const std::string y2 = b.Add("Dropout", "drop2", {"x"}, {{"rate", AttrF(0.3f)}});
  const std::string mask2 = TensorName(ParseTensorName(y2).first, 1);
  auto cpu = Executor::Create(g);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::mt19937 rng(5);
  const Tensor x = RandomTensor(TensorShape({200, 500}), &rng, 0.5f, 1.5f);
  auto a = (*cpu)->Run({{"x", x}}, {y, mask, mask2}, 11, true);
  ASSERT_TRUE(a.ok()) << a.status();
  const float scale = 1.0f / 0.7f;
  int64_t kept = 0, same_as_other_node = 0;
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    const float m = (*a)[1].data<float>()[i];
    ASSERT_TRUE(m == 0.0f || m == scale) << m;
    kept += m != 0.0f;
    same_as_other_node += m == (*a)[2].data<float>()[i];
    ASSERT_EQ((*a)[0].data<float>()[i], x.data<float>()[i] * m);
  }
  EXPECT_NEAR(static_cast<double>(kept) / x.NumElements(), 0.7, 0.01);
  // Two nodes draw independently: they agree where two 0.7-coins agree.
  EXPECT_NEAR(static_cast<double>(same_as_other_node) / x.NumElements(), 0.7 * 0.7 + 0.3 * 0.3, 0.01);
  auto again = (*cpu)->Run({{"x", x}}, {mask}, 11, true);
  auto other = (*cpu)->Run({{"x", x}}, {mask}, 12, true);
  ASSERT_TRUE(again.ok() && other.ok());
  int64_t same = 0, differ = 0;
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    same += (*again)[0].data<float>()[i] == (*a)[1].data<float>()[i];
    differ += (*other)[0].data<float>()[i] != (*a)[1].data<float>()[i];
  }
  EXPECT_EQ(same, x.NumElements());  // a seed gives one mask
  EXPECT_NEAR(static_cast<double>(differ) / x.NumElements(), 1 - (0.7 * 0.7 + 0.3 * 0.3), 0.01);
  // Not training: everything passes.
  auto eval = (*cpu)->Run({{"x", x}}, {y}, 11, false);
  ASSERT_TRUE(eval.ok());
  for (int64_t i = 0; i < x.NumElements(); ++i) ASSERT_EQ((*eval)[0].data<float>()[i], x.data<float>()[i]);
}

}  // namespace
}  // namespace psrt
