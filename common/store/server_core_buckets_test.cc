// A worker's step pushed to the PS in parts (RequestId.bucket): each part
// applied once, the step counted once, only when every part is in.
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/store/push_part_id.h"
#include "common/store/server_core.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

ParameterServerCore::PullDone Into(absl::Notification* done, absl::Status* status, std::vector<float>* out) {
  return [=](absl::Status s, NamedTensors t, int64_t) {
    *status = s;
    for (const auto& [name, v] : t) out->insert(out->end(), v.data<float>(), v.data<float>() + v.NumElements());
    done->Notify();
  };
}

class BucketsTest : public ::testing::Test {
 protected:
  void Make(ConsistencyDef::Mode mode, int workers) {
    CreateVariablesRequest req;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
      variable { name: "a" dtype: DT_FLOAT shape { dim: 1 } initializer { kind: ZEROS } }
      variable { name: "b" dtype: DT_FLOAT shape { dim: 1 } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 1 } })", &req));
    req.mutable_consistency()->set_mode(mode);
    req.set_num_workers(workers);
    ASSERT_TRUE(ps_.CreateVariables(req).ok());
  }
  // Part `bucket` of worker's step (0: the whole step) with gradient g for `var`.
  absl::StatusOr<PushResponse> Push(int worker, int64_t step, int bucket, bool last, const std::string& var,
                                    float g, uint64_t incarnation = 1) {
    return ps_.Push(PartId(worker, incarnation, step, bucket, last),
                    {{var, Tensor::FromVector<float>({g}, TensorShape({1}))}});
  }
  // a and b, for worker 0 at `step` (waits as a SYNC pull does).
  std::vector<float> Pull(int64_t step) {
    absl::Notification done;
    absl::Status status;
    std::vector<float> out;
    ps_.Pull({"a", "b"}, 0, step, absl::Now() + absl::Seconds(30), Into(&done, &status, &out));
    done.WaitForNotification();
    EXPECT_TRUE(status.ok()) << status;
    return out;
  }

  ParameterServerCore ps_{ServerCoreOptions()};
};

TEST_F(BucketsTest, AsyncAppliesEachPartOnceAndCountsTheStepAtTheLast) {
  Make(ConsistencyDef::ASYNC, 1);
  ASSERT_FALSE(Push(0, 0, 1, false, "a", 1)->duplicate());
  EXPECT_EQ(Pull(1), (std::vector<float>{-1, 0}));  // applied at once
  EXPECT_EQ(ps_.Status().global_step(), 0);         // the step is not in yet
  EXPECT_TRUE(Push(0, 0, 1, false, "a", 1)->duplicate());  // a retried part
  ASSERT_FALSE(Push(0, 0, 2, true, "b", 2)->duplicate());
  EXPECT_EQ(ps_.Status().global_step(), 1);
  EXPECT_EQ(Pull(1), (std::vector<float>{-1, -2}));
  // Every part of a counted step, and the whole step, are duplicates now.
  EXPECT_TRUE(Push(0, 0, 1, false, "a", 1)->duplicate());
  EXPECT_TRUE(Push(0, 0, 2, true, "b", 2)->duplicate());
  EXPECT_TRUE(Push(0, 0, 0, false, "a", 1)->duplicate());
  EXPECT_EQ(Pull(1), (std::vector<float>{-1, -2}));
}

// Two workers: worker 0 in two parts, worker 1 whole. The step is applied
// (and a pull of the next step answered) only once worker 0's last part is
// in, and a part is not a worker's contribution of its own.
TEST_F(BucketsTest, SyncCountsAWorkerOnceAllItsPartsAreIn) {
  Make(ConsistencyDef::SYNC, 2);
  ASSERT_TRUE(Push(0, 0, 2, true, "b", 4).ok());  // the last part first
  ASSERT_TRUE(Push(1, 0, 0, false, "a", 2).ok());
  absl::Notification done;
  absl::Status status;
  std::vector<float> next;
  ps_.Pull({"a", "b"}, 0, 1, absl::Now() + absl::Seconds(30), Into(&done, &status, &next));
  EXPECT_FALSE(done.HasBeenNotified());  // worker 0 has one part of two in
  EXPECT_TRUE(Push(0, 0, 2, true, "b", 4)->duplicate());
  ASSERT_TRUE(Push(0, 0, 1, false, "a", 6).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(next, (std::vector<float>{-4, -2}));  // (6 + 2) / 2 and 4 / 2, each once
  EXPECT_TRUE(Push(0, 0, 1, false, "a", 6)->duplicate());
  EXPECT_EQ(Pull(1), (std::vector<float>{-4, -2}));
}

// A worker that died with part of its step pushed: the restarted one
// (another incarnation) pushes the step again, and only that counts.
TEST_F(BucketsTest, SyncNeverCountsThePartsOfAWorkerThatDiedMidStep) {
  Make(ConsistencyDef::SYNC, 2);
  ASSERT_TRUE(Push(0, 0, 1, false, "a", 100).ok());  // incarnation 1, then it dies
  ASSERT_TRUE(Push(0, 0, 0, false, "a", 6, 2).ok());  // incarnation 2, the whole step
  ASSERT_TRUE(Push(1, 0, 0, false, "a", 2).ok());
  EXPECT_EQ(Pull(1), (std::vector<float>{-4, 0}));  // (6 + 2) / 2: the dead part is not in
}

TEST_F(BucketsTest, MalformedOrContradictoryPartsAreRefusedAndChangeNothing) {
  Make(ConsistencyDef::ASYNC, 1);
  absl::StatusOr<PushResponse> r = Push(0, 0, -2, false, "a", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bucket -2"), absl::string_view::npos) << r.status();
  EXPECT_EQ(Push(0, 0, 0, true, "a", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Push(0, 0, kMaxPushBuckets + 1, false, "a", 1).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Push(0, 0, 2, true, "a", 1).ok());
  EXPECT_EQ(Push(0, 0, 3, false, "b", 1).status().code(), absl::StatusCode::kInvalidArgument);  // past the last
  EXPECT_EQ(Pull(1), (std::vector<float>{-1, 0}));
  // Rows travel only in a step's last part.
  RequestId id;
  id.set_step(1);
  id.set_bucket(1);
  SparseUpdate u{"a", Tensor::FromVector<int64_t>({0}, TensorShape({1})),
                 Tensor::FromVector<float>({1}, TensorShape({1, 1}))};
  absl::StatusOr<PushResponse> rows = ps_.PushRows(id, {u});
  EXPECT_EQ(rows.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rows.status().message().find("last bucket"), absl::string_view::npos) << rows.status();
}

}  // namespace
}  // namespace psrt
