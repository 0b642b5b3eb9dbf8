// Moving-average variables (VariableDef.moving_average: BatchNormalization's
// moving mean and variance, docs/models.md "Batch normalisation") in the
// store: a push carries a value and the store assigns
// var = momentum * var + (1 - momentum) * value instead of the optimizer's
// update (SYNC: the mean of the step's pushes; ASYNC: each push); they have
// no optimizer slots, AdamW's weight decay passes them by, a bad momentum is
// refused naming the variable, and snapshots and restores (the same layout
// or another) carry them.
#include <cmath>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/store/restore_assembly.h"
#include "common/store/server_core.h"
#include "common/store/variable.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

// "w" trained by AdamW; "mm" [2] a moving average from [1, 1].
CreateVariablesRequest Vars(const std::string& mode, int workers, float momentum = 0.9f) {
  CreateVariablesRequest req;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
    variable { name: "w" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ZEROS } }
    variable { name: "mm" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ONES } }
    optimizer { adamw { learning_rate: 0.1 weight_decay: 0.5 } })", &req));
  req.mutable_variable(1)->mutable_moving_average()->set_momentum(momentum);
  ConsistencyDef::Mode m = ConsistencyDef::ASYNC;
  EXPECT_TRUE(ConsistencyDef::Mode_Parse(mode, &m));
  req.mutable_consistency()->set_mode(m);
  req.set_num_workers(workers);
  return req;
}

RequestId Id(int worker, int64_t step) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(1);
  id.set_step(step);
  return id;
}

NamedTensors Push(float w, float m0, float m1) {
  return {{"w", Tensor::FromVector<float>({w, w}, TensorShape({2}))},
          {"mm", Tensor::FromVector<float>({m0, m1}, TensorShape({2}))}};
}

std::vector<float> Pull(ParameterServerCore* ps, const std::string& name, int64_t step) {
  absl::Notification done;
  std::vector<float> out;
  ps->Pull({name}, 0, step, absl::Now() + absl::Seconds(30), [&](absl::Status s, NamedTensors t, int64_t) {
    EXPECT_TRUE(s.ok()) << s;
    if (s.ok()) out.assign(t[0].second.data<float>(), t[0].second.data<float>() + t[0].second.NumElements());
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

ServerCoreOptions Options(const std::string& name) {
  ServerCoreOptions o;
  o.incarnation = 7;
  o.snapshot_root = absl::StrCat(::testing::TempDir(), "/moving_", name);
  return o;
}

TEST(MovingAverageTest, SyncAssignsFromTheMeanOfTheWorkersValues) {
  ParameterServerCore ps(Options("sync"));
  ASSERT_TRUE(ps.CreateVariables(Vars("SYNC", 2)).ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), Push(1, 3, 5)).ok());
  EXPECT_EQ(Pull(&ps, "mm", 0), (std::vector<float>{1, 1}));  // not applied until both pushed
  ASSERT_TRUE(ps.Push(Id(1, 0), Push(1, 5, 7)).ok());
  // 0.9 * 1 + 0.1 * mean(3, 5) and 0.9 * 1 + 0.1 * mean(5, 7).
  const std::vector<float> mm = Pull(&ps, "mm", 1);
  ASSERT_EQ(mm.size(), 2u);
  EXPECT_FLOAT_EQ(mm[0], 0.9f + 0.1f * 4);
  EXPECT_FLOAT_EQ(mm[1], 0.9f + 0.1f * 6);
  // The trained variable went through AdamW as before.
  const std::vector<float> w = Pull(&ps, "w", 1);
  EXPECT_NEAR(w[0], -0.1f, 1e-5);
}

TEST(MovingAverageTest, AsyncAssignsEachPushAsItComes) {
  ParameterServerCore ps(Options("async"));
  ASSERT_TRUE(ps.CreateVariables(Vars("ASYNC", 2, 0.75f)).ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), Push(1, 3, 5)).ok());
  ASSERT_TRUE(ps.Push(Id(1, 0), Push(1, 5, 9)).ok());
  const float first[2] = {0.75f + 0.25f * 3, 0.75f + 0.25f * 5};
  const std::vector<float> mm = Pull(&ps, "mm", 2);
  EXPECT_FLOAT_EQ(mm[0], 0.75f * first[0] + 0.25f * 5);
  EXPECT_FLOAT_EQ(mm[1], 0.75f * first[1] + 0.25f * 9);
}

TEST(MovingAverageTest, HasNoSlotsAndNoWeightDecay) {
  VariableDef def;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(name: "mm" dtype: DT_FLOAT shape { dim: 4 } initializer { kind: ONES } moving_average { momentum: 1 })", &def));
  OptimizerDef adamw;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString("adamw { learning_rate: 0.1 weight_decay: 0.5 }", &adamw));
  auto opt = Optimizer::Create(adamw);
  ASSERT_TRUE(opt.ok()) << opt.status();
  auto v = Variable::Create(def, opt->get());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->bytes(), 4 * sizeof(float));  // the value alone
  EXPECT_TRUE((*v)->CopyState().slots.empty());
  // Momentum 1 keeps the value: no decay, no optimizer step.
  ASSERT_TRUE((*v)->ApplyDense(Tensor::FromVector<float>({9, 9, 9, 9}, TensorShape({4}))).ok());
  auto read = (*v)->Read();
  ASSERT_TRUE(read.ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(read->data<float>()[i], 1.0f);
}

TEST(MovingAverageTest, ABadMomentumIsRefusedNamingTheVariable) {
  for (float bad : {-0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    ParameterServerCore ps(Options("bad"));
    absl::Status s = ps.CreateVariables(Vars("ASYNC", 1, bad)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("variable mm: moving_average.momentum")) << s;
    EXPECT_THAT(s.message(), HasSubstr("is not in [0, 1]")) << s;
  }
  // A table cannot be one.
  CreateVariablesRequest req = Vars("ASYNC", 1);
  req.mutable_variable(1)->set_kind(VariableDef::FIXED_TABLE);
  req.mutable_variable(1)->mutable_shape()->add_dim(1);
  ParameterServerCore ps(Options("table"));
  EXPECT_THAT(ps.CreateVariables(req).status().message(), HasSubstr("a moving average is a DENSE variable"));
}

// A snapshot holds the moving values at its step (no slots), a restore
// puts them back, and a restore from another store's snapshot (another
// layout: AssembleVariables) carries them too.
TEST(MovingAverageTest, SnapshotsAndRestoresCarryThem) {
  const std::string root = absl::StrCat(::testing::TempDir(), "/moving_restore");
  ASSERT_EQ(std::system(absl::StrCat("rm -rf ", root).c_str()), 0);
  ServerCoreOptions o;
  o.snapshot_root = root;
  o.store_name = "a";
  ParameterServerCore a(o);
  ASSERT_TRUE(a.CreateVariables(Vars("ASYNC", 1)).ok());
  ASSERT_TRUE(a.Push(Id(0, 0), Push(1, 11, 21)).ok());  // mm = [2, 3]
  SnapshotRequest snap;
  snap.set_step(1);
  snap.set_checkpoint("ckpt");
  snap.set_wait_durable(true);
  ASSERT_TRUE(a.Snapshot(snap).ok());
  const std::vector<float> at_snapshot = Pull(&a, "mm", 1);
  EXPECT_FLOAT_EQ(at_snapshot[0], 2.0f);
  EXPECT_FLOAT_EQ(at_snapshot[1], 3.0f);
  ASSERT_TRUE(a.Push(Id(0, 1), Push(1, 100, 100)).ok());
  EXPECT_NE(Pull(&a, "mm", 2), at_snapshot);
  RestoreRequest back;
  back.set_step(1);
  back.set_checkpoint("ckpt");
  ASSERT_TRUE(a.Restore(back).ok());
  EXPECT_EQ(Pull(&a, "mm", 1), at_snapshot);

  ServerCoreOptions ob = o;
  ob.store_name = "b";
  ParameterServerCore b(ob);
  ASSERT_TRUE(b.CreateVariables(Vars("ASYNC", 1)).ok());
  RestoreRequest other;
  other.set_step(1);
  other.set_checkpoint("ckpt");
  other.set_generation(3);
  other.add_source("a");
  absl::StatusOr<RestoreResponse> r = b.Restore(other);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Pull(&b, "mm", 1), at_snapshot);
}

}  // namespace
}  // namespace psrt
