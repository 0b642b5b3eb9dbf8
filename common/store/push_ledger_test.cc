#include "common/store/push_ledger.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

RequestId Id(int worker, uint64_t incarnation, int64_t step) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(incarnation);
  id.set_step(step);
  return id;
}

TEST(PushLedgerTest, ARetryIsSeenUntilANewIncarnation) {
  PushLedger ledger;
  EXPECT_FALSE(ledger.PushSeen(Id(0, 7, 3)));
  ledger.RecordPush(Id(0, 7, 3));
  EXPECT_TRUE(ledger.PushSeen(Id(0, 7, 3)));
  EXPECT_FALSE(ledger.PushSeen(Id(1, 7, 3)));
  EXPECT_FALSE(ledger.RowsSeen(Id(0, 7, 3)));  // PushRows keeps its own record
  ledger.RecordPush(Id(0, 8, 4));               // a restarted worker
  EXPECT_FALSE(ledger.PushSeen(Id(0, 7, 3)));
  EXPECT_TRUE(ledger.PushSeen(Id(0, 8, 4)));
  ledger.Clear();
  EXPECT_FALSE(ledger.PushSeen(Id(0, 8, 4)));
}

TEST(PushLedgerTest, RemembersTheLastStepsOnly) {
  PushLedger ledger;
  for (int64_t s = 0; s < static_cast<int64_t>(PushLedger::kRecentPushes) + 10; ++s) ledger.RecordRows(Id(2, 1, s));
  EXPECT_FALSE(ledger.RowsSeen(Id(2, 1, 0)));
  EXPECT_TRUE(ledger.RowsSeen(Id(2, 1, PushLedger::kRecentPushes + 9)));
}

TEST(PushLedgerTest, AppliesTheMeanOfTheGatheredStepThenEmptiesIt) {
  OptimizerDef od;
  od.mutable_sgd()->set_learning_rate(1.0f);
  std::unique_ptr<Optimizer> opt = *Optimizer::Create(od);
  VariableDef def;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(name: "w" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: CONSTANT value: 1 })", &def));
  std::unique_ptr<Variable> w = *Variable::Create(def, opt.get());
  std::unique_ptr<WorkPool> pool = WorkPool::Create(1);
  auto find = [&](const std::string& name) -> absl::StatusOr<Variable*> {
    if (name != "w") return absl::NotFoundError(name);
    return w.get();
  };

  PushLedger ledger;
  NamedTensors g0 = {{"w", Tensor::FromVector<float>({2, 4}, TensorShape({2}))}};
  NamedTensors g1 = {{"w", Tensor::FromVector<float>({4, 8}, TensorShape({2}))}};
  ledger.GatherDense(0, g0);
  ledger.GatherDense(1, g1);
  EXPECT_EQ(g0[0].second.data<float>()[0], 2.0f);  // the first is copied, not summed into
  EXPECT_TRUE(ledger.Gathered(1));
  EXPECT_EQ(ledger.gathered_workers(), 2);
  ASSERT_TRUE(ledger.ApplyMean(2, find, pool.get()).ok());
  Tensor now = *w->Read();
  EXPECT_EQ(std::vector<float>(now.data<float>(), now.data<float>() + 2), (std::vector<float>{-2.0f, -5.0f}));
  EXPECT_EQ(ledger.gathered_workers(), 0);
  EXPECT_FALSE(ledger.Gathered(1));

  // The next steps fill the last step's sum again (kept between steps):
  // each is still the mean of its own gradients, the pushed ones unchanged;
  // one worker's gradient applied as it is.
  NamedTensors g2 = {{"w", Tensor::FromVector<float>({1, 1}, TensorShape({2}))}};
  NamedTensors g3 = {{"w", Tensor::FromVector<float>({3, 3}, TensorShape({2}))}};
  ledger.GatherDense(0, g2);
  ledger.GatherDense(1, g3);
  ASSERT_TRUE(ledger.ApplyMean(2, find, pool.get()).ok());
  EXPECT_EQ(g2[0].second.data<float>()[0], 1.0f);
  now = *w->Read();
  EXPECT_EQ(std::vector<float>(now.data<float>(), now.data<float>() + 2), (std::vector<float>{-4.0f, -7.0f}));
  ledger.GatherDense(0, {{"w", Tensor::FromVector<float>({0.5f, 1}, TensorShape({2}))}});
  ASSERT_TRUE(ledger.ApplyMean(1, find, pool.get()).ok());
  now = *w->Read();
  EXPECT_EQ(std::vector<float>(now.data<float>(), now.data<float>() + 2), (std::vector<float>{-4.5f, -8.0f}));

  // A variable gone: the error, and the step still gathered.
  ledger.GatherDense(0, {{"gone", Tensor::FromVector<float>({1}, TensorShape({1}))}});
  EXPECT_EQ(ledger.ApplyMean(1, find, pool.get()).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(ledger.Gathered(0));
}

}  // namespace
}  // namespace psrt
