// MoveVariables: a variable's whole state copied out of one PS, loaded
// into another, dropped from the first; hostile requests refused whole.
#include "absl/synchronization/notification.h"
#include "common/store/server_core.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

CreateVariablesRequest Create(int64_t generation) {
  CreateVariablesRequest req;
  google::protobuf::TextFormat::ParseFromString(R"(
    variable { name: "w" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ZEROS } }
    variable { name: "emb" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 } initializer { kind: ZEROS } }
    optimizer { adam { learning_rate: 0.1 } }
    consistency { mode: ASYNC } num_workers: 1)", &req);
  req.set_generation(generation);
  return req;
}

absl::StatusOr<PushResponse> PushW(ParameterServerCore* ps, int64_t step, int64_t generation) {
  RequestId id;
  id.set_worker(0);
  id.set_worker_incarnation(1);
  id.set_step(step);
  id.set_generation(generation);
  return ps->Push(id, {{"w", Tensor::FromVector<float>({1, -2}, TensorShape({2}))}});
}

std::vector<float> PullW(ParameterServerCore* ps) {
  absl::Notification done;
  std::vector<float> out;
  ps->Pull({"w"}, -1, 0, absl::InfiniteFuture(), [&](absl::Status s, NamedTensors t, int64_t) {
    if (s.ok()) {
      const float* d = t[0].second.data<float>();
      out.assign(d, d + 2);
    }
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

TEST(ServerCoreMoveTest, StateMovesWholeAndTheSourceForgetsIt) {
  ParameterServerCore from(ServerCoreOptions{}), to(ServerCoreOptions{});
  ASSERT_TRUE(from.CreateVariables(Create(7)).ok());
  ASSERT_TRUE(to.CreateVariables(Create(7)).ok());
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(PushW(&from, step, 7).ok());

  MoveVariablesRequest copy;
  copy.add_copy("w");
  copy.set_generation(7);
  auto out = from.MoveVariables(copy);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->state_size(), 1);
  EXPECT_EQ(out->state(0).updates(), 3);
  EXPECT_EQ(out->state(0).slot_size(), 2) << "Adam's two slots";

  MoveVariablesRequest load;
  *load.add_load() = out->state(0);
  ASSERT_TRUE(to.MoveVariables(load).ok());
  EXPECT_EQ(PullW(&to), PullW(&from)) << "values moved bit for bit";
  // The next update applies the same on both: slots and counter moved too.
  ASSERT_TRUE(PushW(&from, 3, 7).ok());
  ASSERT_TRUE(PushW(&to, 3, 7).ok());
  EXPECT_EQ(PullW(&to), PullW(&from));

  MoveVariablesRequest drop;
  drop.add_drop("w");
  ASSERT_TRUE(from.MoveVariables(drop).ok());
  ASSERT_TRUE(from.MoveVariables(drop).ok()) << "a retried drop";
  EXPECT_THAT(std::string(PushW(&from, 4, 7).status().message()), HasSubstr("w"));
  EXPECT_EQ(from.Status().variables(), 1);
  EXPECT_FALSE(from.WaitHoldsNone(absl::Now())) << "it still holds emb";
  drop.set_drop(0, "emb");
  ASSERT_TRUE(from.MoveVariables(drop).ok());
  EXPECT_TRUE(from.WaitHoldsNone(absl::Now() + absl::Seconds(10))) << "a leaving PS's wait ends";
}

TEST(ServerCoreMoveTest, HostileRequestsAreRefusedBeforeAnythingChanges) {
  ParameterServerCore ps(ServerCoreOptions{});
  ASSERT_TRUE(ps.CreateVariables(Create(7)).ok());
  ASSERT_TRUE(PushW(&ps, 0, 7).ok());
  const std::vector<float> before = PullW(&ps);

  MoveVariablesRequest r;
  r.add_copy("w");
  r.set_generation(6);
  EXPECT_EQ(ps.MoveVariables(r).status().code(), absl::StatusCode::kFailedPrecondition) << "another generation";

  r = MoveVariablesRequest();
  r.add_copy("w");
  r.add_copy("w");
  EXPECT_THAT(std::string(ps.MoveVariables(r).status().message()), HasSubstr("listed twice"));

  r = MoveVariablesRequest();
  r.add_copy("nowhere");
  EXPECT_EQ(ps.MoveVariables(r).status().code(), absl::StatusCode::kNotFound);

  // A load of the wrong shape, with a good one and a drop beside it:
  // nothing loaded, nothing dropped.
  MoveVariablesRequest copy;
  copy.add_copy("w");
  VariableStateProto good = ps.MoveVariables(copy)->state(0);
  VariableStateProto bad = good;
  bad.mutable_value()->mutable_shape()->set_dim(0, 3);
  r = MoveVariablesRequest();
  *r.add_load() = bad;
  r.add_drop("emb");
  EXPECT_FALSE(ps.MoveVariables(r).ok());
  bad = good;
  bad.set_updates(-1);
  r = MoveVariablesRequest();
  *r.add_load() = bad;
  EXPECT_THAT(std::string(ps.MoveVariables(r).status().message()), HasSubstr("updates"));
  bad = good;
  bad.mutable_def()->mutable_shape()->set_dim(0, 5);
  r = MoveVariablesRequest();
  *r.add_load() = bad;
  EXPECT_FALSE(ps.MoveVariables(r).ok()) << "a def that is not this variable's";
  r = MoveVariablesRequest();
  *r.add_load() = good;
  *r.add_load() = good;
  EXPECT_THAT(std::string(ps.MoveVariables(r).status().message()), HasSubstr("loaded twice"));
  EXPECT_EQ(ps.Status().variables(), 2) << "nothing dropped";
  EXPECT_EQ(PullW(&ps), before) << "nothing loaded";
}

}  // namespace
}  // namespace psrt
