#include "common/compute/mirrored_devices_runner.h"

#include <cmath>

#include "common/collective/local_collective.h"
#include "common/compute/graph_step_runner.h"
#include "common/input/dataset.h"
#include "common/plan/job_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

// The MLP example without dropout (so one device and several compute the
// same function), batches of `batch` examples.
WorkerAssignment Mlp(int batch) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  EXPECT_TRUE(job.ok()) << job.status();
  auto* layers = job->mutable_model()->mutable_sequential()->mutable_layer();
  for (int i = layers->size() - 1; i >= 0; --i) {
    if (layers->Get(i).has_dropout()) layers->DeleteSubrange(i, 1);
  }
  job->mutable_input()->set_batch_size(batch);
  absl::StatusOr<JobPlan> plan = PlanJob(*job, 1);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return AssignmentOf(*job, *plan);
}

// Deterministic, not-all-zero parameters of every dense variable.
TensorMap Parameters(const WorkerAssignment& a) {
  TensorMap out;
  for (const VariablePlacement& vp : a.placement().variable()) {
    Tensor t = Tensor::Zeros(DT_FLOAT, *TensorShape::FromProto(vp.variable().shape()));
    float* d = t.data<float>();
    for (int64_t i = 0; i < t.NumElements(); ++i) d[i] = 0.05f * std::sin(0.37f * i + vp.variable().name().size());
    out[vp.variable().name()] = t;
  }
  return out;
}

Batch FirstBatch(const WorkerAssignment& a) {
  DatasetOptions o;
  o.input = a.input();
  o.split = a.input().train();
  o.seed = 1;
  auto d = Dataset::Create(o);
  EXPECT_TRUE(d.ok()) << d.status();
  Batch b;
  EXPECT_TRUE(*(*d)->Next(&b));
  return b;
}

absl::StatusOr<std::unique_ptr<MirroredDevicesRunner>> Devices(
    const WorkerAssignment& a, int n, const MirroredDevicesRunner::RanksFactory& make_ranks = nullptr) {
  return MirroredDevicesRunner::Create(
      a, n,
      [&a](int) -> absl::StatusOr<std::unique_ptr<StepRunner>> {
        auto r = GraphStepRunner::Create(a, 1);
        if (!r.ok()) return r.status();
        return std::unique_ptr<StepRunner>(std::move(*r));
      },
      make_ranks);
}

// Several devices on slices give the gradient, loss and accuracy of one
// device on the whole batch, also when the batch does not split evenly and
// when a device's slice is empty.
TEST(MirroredDevicesRunnerTest, DevicesComputeTheWholeBatchsGradients) {
  for (auto [batch, devices] : std::vector<std::pair<int, int>>{{64, 2}, {7, 3}, {1, 2}}) {
    WorkerAssignment a = Mlp(batch);
    TensorMap params = Parameters(a);
    Batch b = FirstBatch(a);
    ASSERT_EQ(b.size, batch);
    auto one = GraphStepRunner::Create(a, 1);
    ASSERT_TRUE(one.ok()) << one.status();
    absl::StatusOr<StepResult> want = (*one)->Run(params, {}, b, 5);
    ASSERT_TRUE(want.ok()) << want.status();
    auto many = Devices(a, devices);
    ASSERT_TRUE(many.ok()) << many.status();
    EXPECT_EQ((*many)->device(), absl::StrCat(devices, " x cpu"));
    absl::StatusOr<StepResult> got = (*many)->Run(params, {}, b, 5);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(got->loss, want->loss, 1e-5 * std::abs(want->loss)) << batch << " on " << devices;
    ASSERT_EQ(got->metrics.size(), want->metrics.size());
    for (const auto& [m, v] : want->metrics) EXPECT_NEAR(got->metrics.at(m), v, 1e-5) << m;
    ASSERT_EQ(got->dense_gradients.size(), want->dense_gradients.size());
    for (const auto& [v, g] : want->dense_gradients) {
      const Tensor& h = got->dense_gradients.at(v);
      ASSERT_EQ(h.shape(), g.shape()) << v;
      double scale = 0;
      for (int64_t i = 0; i < g.NumElements(); ++i) scale = std::max<double>(scale, std::abs(g.data<float>()[i]));
      for (int64_t i = 0; i < g.NumElements(); ++i) {
        ASSERT_NEAR(h.data<float>()[i], g.data<float>()[i], 1e-4 * scale + 1e-7)
            << v << "[" << i << "], batch " << batch << " on " << devices;
      }
    }
  }
}

TEST(MirroredDevicesRunnerTest, RefusesSparseFeaturesAndBadCounts) {
  WorkerAssignment a = Mlp(8);
  EXPECT_EQ(Devices(a, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Devices(a, 65).status().code(), absl::StatusCode::kInvalidArgument);
  FeatureDef* f = a.mutable_input()->add_feature();
  f->set_name("ids");
  f->set_kind(FeatureDef::SPARSE);
  absl::Status s = Devices(a, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"ids\" is sparse"));
}

// The worker passes NCCL's group for GPU devices: the runner reduces with
// whatever group it is given, and a group it cannot get fails Create.
TEST(MirroredDevicesRunnerTest, UsesTheGivenLocalAllReduce) {
  WorkerAssignment a = Mlp(16);
  int made = 0;
  auto counted = [&made](int n) -> absl::StatusOr<std::vector<std::unique_ptr<Collective>>> {
    ++made;
    return LocalCollectiveGroup::Create(n);
  };
  auto many = Devices(a, 2, counted);
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(made, 1);
  absl::StatusOr<StepResult> got = (*many)->Run(Parameters(a), {}, FirstBatch(a), 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(std::isfinite(got->loss));

  auto refused = [](int) -> absl::StatusOr<std::vector<std::unique_ptr<Collective>>> {
    return absl::FailedPreconditionError("no NCCL group of 2 GPUs: 1 visible");
  };
  EXPECT_EQ(Devices(a, 2, refused).status().code(), absl::StatusCode::kFailedPrecondition);
  auto short_group = [](int) -> absl::StatusOr<std::vector<std::unique_ptr<Collective>>> {
    return LocalCollectiveGroup::Create(1);
  };
  EXPECT_EQ(Devices(a, 2, short_group).status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace psrt
