#include "common/store/step_gate.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

CreateVariablesRequest Config(const std::string& text) {
  CreateVariablesRequest r;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &r)) << text;
  return r;
}

void Configure(StepGate* gate, const CreateVariablesRequest& req) {
  ASSERT_TRUE(StepGate::CheckConfig(req).ok()) << StepGate::CheckConfig(req);
  absl::MutexLock l(gate->mu());
  gate->ConfigureLocked(req, /*new_generation=*/true);
}

// A pull's callback that records what it was answered.
struct Answer {
  absl::Notification done;
  absl::Status status = absl::UnknownError("not run");
  StepGate::Run Run() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
};

TEST(StepGateTest, SyncPullWaitsForItsStepAndRunsOnceTheStepMovesOn) {
  StepGate gate;
  Configure(&gate, Config("num_workers: 2 consistency { mode: SYNC }"));
  Answer now, later;
  gate.WaitOrRun(0, 0, absl::InfiniteFuture(), now.Run());
  EXPECT_TRUE(now.done.HasBeenNotified());  // step 0 is ready at once
  gate.WaitOrRun(0, 1, absl::InfiniteFuture(), later.Run());
  gate.WakeWaiters();
  EXPECT_FALSE(later.done.HasBeenNotified());
  {
    absl::MutexLock l(gate.mu());
    gate.AdvanceSyncStepLocked();
    EXPECT_EQ(gate.sync_step(), 1);
    EXPECT_EQ(gate.global_step(), 1);
  }
  gate.WakeWaiters();
  ASSERT_TRUE(later.done.HasBeenNotified());
  EXPECT_TRUE(later.status.ok()) << later.status;
}

TEST(StepGateTest, BoundedStalenessCountsOnlyActiveWorkers) {
  StepGate gate;
  // Workers 0 and 2 are the job's; 1 left. Staleness 1.
  Configure(&gate, Config("num_workers: 2 active_workers: [0, 2] consistency { mode: BOUNDED_STALENESS staleness: 1 }"));
  Answer ahead;
  gate.WaitOrRun(0, 2, absl::InfiniteFuture(), ahead.Run());  // 2 - 0 > 1: waits
  EXPECT_FALSE(ahead.done.HasBeenNotified());
  {
    absl::MutexLock l(gate.mu());
    gate.CountPushLocked(1, 100);  // not active: counts for nothing
    gate.CountPushLocked(1 << 30, 5);  // a worker id from the wire sizes nothing
    gate.CountPushLocked(0, 0);
  }
  gate.WakeWaiters();
  EXPECT_FALSE(ahead.done.HasBeenNotified());  // worker 2 is still at step 0
  {
    absl::MutexLock l(gate.mu());
    gate.CountPushLocked(2, 0);
    EXPECT_EQ(gate.worker_next_step().size(), 3u);
  }
  gate.WakeWaiters();
  ASSERT_TRUE(ahead.done.HasBeenNotified());
  EXPECT_TRUE(ahead.status.ok());
}

TEST(StepGateTest, ParkedPullFailsAtItsDeadline) {
  StepGate gate;
  Configure(&gate, Config("num_workers: 2 consistency { mode: SYNC }"));
  Answer a;
  gate.WaitOrRun(1, 3, absl::Now() + absl::Milliseconds(50), a.Run());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(a.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(a.status.message()), HasSubstr("pull for step 3 waited too long"));
}

TEST(StepGateTest, StopAnswersParkedPullsAndThenEveryPullRuns) {
  StepGate gate;
  Configure(&gate, Config("num_workers: 2 consistency { mode: SYNC }"));
  Answer parked, after;
  gate.WaitOrRun(1, 3, absl::InfiniteFuture(), parked.Run());
  gate.Stop(absl::UnavailableError("ps:0 is shutting down"));
  ASSERT_TRUE(parked.done.HasBeenNotified());
  EXPECT_EQ(parked.status.code(), absl::StatusCode::kUnavailable);
  gate.WaitOrRun(1, 9, absl::InfiniteFuture(), after.Run());
  ASSERT_TRUE(after.done.HasBeenNotified());
  EXPECT_TRUE(after.status.ok());
}

TEST(StepGateTest, ACallbackMayTakeTheGateLock) {
  // Callbacks never run under the gate's lock: one that takes it (as a
  // pull does, to read the global step) does not deadlock.
  StepGate gate;
  Configure(&gate, Config("num_workers: 1 consistency { mode: SYNC }"));
  std::atomic<int64_t> seen{-1};
  gate.WaitOrRun(0, 1, absl::InfiniteFuture(), [&](absl::Status) {
    absl::MutexLock l(gate.mu());
    seen = gate.global_step();
  });
  {
    absl::MutexLock l(gate.mu());
    gate.AdvanceSyncStepLocked();
  }
  gate.WakeWaiters();
  EXPECT_EQ(seen.load(), 1);
}

TEST(StepGateTest, TakeParkedLeavesNoneAndRestoreSetsCounters) {
  StepGate gate;
  Configure(&gate, Config("num_workers: 3 consistency { mode: SYNC }"));
  Answer a;
  gate.WaitOrRun(0, 4, absl::InfiniteFuture(), a.Run());
  std::vector<StepGate::Run> parked;
  {
    absl::MutexLock l(gate.mu());
    parked = gate.TakeParkedLocked();
    gate.RestoreLocked(/*step=*/4, /*global_step=*/40, /*sync_step=*/4, /*worker_next_step=*/{4});
    EXPECT_EQ(gate.global_step(), 40);
    // Workers the snapshot lacks start at its step.
    EXPECT_EQ(gate.worker_next_step(), (std::vector<int64_t>{4, 4, 4}));
  }
  ASSERT_EQ(parked.size(), 1u);
  EXPECT_FALSE(a.done.HasBeenNotified());
  parked[0](absl::AbortedError("moved to generation 2"));
  EXPECT_EQ(a.status.code(), absl::StatusCode::kAborted);
}

TEST(StepGateTest, CheckConfigNamesTheField) {
  EXPECT_THAT(std::string(StepGate::CheckConfig(Config("num_workers: 0")).message()),
              HasSubstr("num_workers must be at least 1"));
  EXPECT_THAT(std::string(StepGate::CheckConfig(Config("num_workers: 100000")).message()),
              HasSubstr("num_workers 100000 is more than 65536"));
  EXPECT_THAT(std::string(StepGate::CheckConfig(
                              Config("num_workers: 1 consistency { mode: BOUNDED_STALENESS staleness: -1 }"))
                              .message()),
              HasSubstr("consistency.staleness"));
  EXPECT_THAT(std::string(StepGate::CheckConfig(Config("num_workers: 2 active_workers: [1, 1]")).message()),
              HasSubstr("lists worker 1 twice"));
  EXPECT_THAT(std::string(StepGate::CheckConfig(Config("num_workers: 1 active_worker_steps: [3]")).message()),
              HasSubstr("active_worker_steps given without active_workers"));
}

}  // namespace
}  // namespace psrt
