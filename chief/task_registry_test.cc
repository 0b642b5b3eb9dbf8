#include "chief/task_registry.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

class FakeClock : public Env {
 public:
  absl::Time Now() override {
    absl::MutexLock l(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration d) override { Advance(d); }
  double RandomFraction() override { return 0.5; }
  void Advance(absl::Duration d) {
    absl::MutexLock l(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::UnixEpoch();
};

ClusterSpec Spec() {
  return *ClusterSpec::FromJson(
      R"({"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3", "h:4"]})", "test");
}

TaskInfo Info(const std::string& task, uint64_t incarnation) {
  TaskInfo t;
  *t.mutable_task() = *ParseTaskId(task);
  t.set_incarnation(incarnation);
  return t;
}

TEST(TaskRegistryTest, RegistrationTellsFirstAgainAndRestart) {
  TaskRegistry r(Spec(), absl::Seconds(10));
  EXPECT_EQ(*r.Register(Info("ps:0", 11)), TaskRegistry::Registration::kFirst);
  EXPECT_EQ(*r.Register(Info("ps:0", 11)), TaskRegistry::Registration::kAgain);
  EXPECT_EQ(*r.Register(Info("ps:0", 12)), TaskRegistry::Registration::kRestarted);
  EXPECT_EQ(r.Get(*ParseTaskId("ps:0")).restarts, 1);
  r.MarkDead(*ParseTaskId("ps:0"));
  EXPECT_EQ(*r.Register(Info("ps:0", 13)), TaskRegistry::Registration::kRestarted);

  EXPECT_THAT(std::string(r.Register(Info("worker:5", 1)).status().message()),
              HasSubstr("worker:5 is not in the cluster spec"));
  EXPECT_EQ(r.Register(Info("ps:0", 0)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TaskRegistryTest, AWorkersCollectiveAddressIsKeptAndCheckedAtTheEdge) {
  TaskRegistry r(Spec(), absl::Seconds(10));
  TaskInfo w = Info("worker:0", 5);
  w.set_collective_address("10.0.0.7:41000");
  ASSERT_TRUE(r.Register(w).ok());
  EXPECT_EQ(r.Get(*ParseTaskId("worker:0")).info.collective_address(), "10.0.0.7:41000");
  for (const char* bad : {"10.0.0.7", "10.0.0.7:0", "10.0.0.7:70000", ":41000", "a b:1", "h:1\nforged"}) {
    TaskInfo b = Info("worker:0", 6);
    b.set_collective_address(bad);
    absl::StatusOr<TaskRegistry::Registration> refused = r.Register(b);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("collective_address")) << bad;
  }
  // Nothing changed by the refused ones; a PS may not name one at all.
  EXPECT_EQ(r.Get(*ParseTaskId("worker:0")).info.incarnation(), 5u);
  TaskInfo p = Info("ps:0", 9);
  p.set_collective_address("10.0.0.8:41000");
  EXPECT_FALSE(r.Register(p).ok());
}

TEST(TaskRegistryTest, HeartbeatsFromUnknownIncarnationsAreAborted) {
  TaskRegistry r(Spec(), absl::Seconds(10));
  ASSERT_TRUE(r.Register(Info("worker:0", 5)).ok());
  HeartbeatRequest beat;
  *beat.mutable_task() = *ParseTaskId("worker:0");
  beat.set_incarnation(5);
  beat.set_step(42);
  beat.set_loss(0.5f);
  EXPECT_TRUE(r.Heartbeat(beat).ok());
  EXPECT_EQ(r.Get(beat.task()).step, 42);
  beat.set_incarnation(6);
  EXPECT_EQ(r.Heartbeat(beat).code(), absl::StatusCode::kAborted);
  // Incarnation 0 is "not registered", not an incarnation: a beat naming it
  // for a task never registered, or marked dead, is no sign of life (found
  // by chief_service_fuzzer).
  beat.set_incarnation(0);
  *beat.mutable_task() = *ParseTaskId("ps:0");
  EXPECT_EQ(r.Heartbeat(beat).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(r.Get(beat.task()).step, 0);
  r.MarkDead(*ParseTaskId("worker:0"));
  *beat.mutable_task() = *ParseTaskId("worker:0");
  beat.set_step(99);
  EXPECT_EQ(r.Heartbeat(beat).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(r.Get(beat.task()).step, 42);
}

TEST(TaskRegistryTest, ExpiryFollowsTheClock) {
  FakeClock clock;
  TaskRegistry r(Spec(), absl::Seconds(3), &clock);
  ASSERT_TRUE(r.Register(Info("worker:0", 1)).ok());
  ASSERT_TRUE(r.Register(Info("worker:1", 2)).ok());
  clock.Advance(absl::Seconds(2));
  HeartbeatRequest beat;
  *beat.mutable_task() = *ParseTaskId("worker:1");
  beat.set_incarnation(2);
  ASSERT_TRUE(r.Heartbeat(beat).ok());
  clock.Advance(absl::Seconds(2));
  std::vector<TaskId> expired = r.Expired("worker");
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(TaskName(expired[0]), "worker:0");
  EXPECT_TRUE(r.Expired("ps").empty());  // never registered is missing, not expired
}

TEST(TaskRegistryTest, WaitForAllListsTheMissingOrReturnsWhenTheyCome) {
  TaskRegistry r(Spec(), absl::Seconds(10));
  ASSERT_TRUE(r.Register(Info("chief:0", 1)).ok());
  ASSERT_TRUE(r.Register(Info("worker:0", 2)).ok());
  absl::Status s = r.WaitForAll(absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps:0 (h:2), worker:1 (h:4)"));

  std::thread late([&] {
    r.WaitForChange(r.version(), absl::Milliseconds(1));
    ASSERT_TRUE(r.Register(Info("ps:0", 3)).ok());
    ASSERT_TRUE(r.Register(Info("worker:1", 4)).ok());
  });
  EXPECT_TRUE(r.WaitForAll(absl::Seconds(30)).ok());
  late.join();
  EXPECT_TRUE(r.Missing().empty());
}

TEST(TaskRegistryTest, AnEvaluatorInTheSpecIsNeitherWaitedForNorRegistered) {
  TaskRegistry r(*ClusterSpec::FromJson(
                     R"({"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3"], "evaluator": ["h:5"]})", "test"),
                 absl::Seconds(10));
  for (const auto& [task, incarnation] : {std::pair{"chief:0", 1}, {"ps:0", 2}, {"worker:0", 3}}) {
    ASSERT_TRUE(r.Register(Info(task, incarnation)).ok());
  }
  EXPECT_TRUE(r.WaitForAll(absl::Milliseconds(50)).ok());
  EXPECT_TRUE(r.Missing().empty());
  EXPECT_EQ(r.Register(Info("evaluator:0", 4)).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psrt

namespace psrt {
namespace {

TEST(TaskRegistryJoinTest, WorkersBeyondTheSpecJoinInOrderUpToMaxWorkers) {
  FakeClock clock;
  TaskRegistry r(Spec(), absl::Seconds(10), &clock);
  TaskInfo w2 = Info("worker:2", 7);
  w2.set_address("h:5");
  // Not elastic: the spec's workers only.
  EXPECT_EQ(r.Register(w2).status().code(), absl::StatusCode::kInvalidArgument);
  r.AdmitWorkersUpTo(3);
  TaskInfo w3 = Info("worker:3", 8);
  w3.set_address("h:6");
  EXPECT_THAT(std::string(r.Register(w3).status().message()), HasSubstr("job.failure.max_workers=3"));
  EXPECT_EQ(r.Register(w3).status().code(), absl::StatusCode::kFailedPrecondition);
  TaskInfo bad = Info("worker:2", 9);
  bad.set_address("no port");
  EXPECT_EQ(r.Register(bad).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(*r.Register(w2), TaskRegistry::Registration::kFirst);
  EXPECT_EQ(r.NumWorkers(), 3);
  EXPECT_EQ(r.Get(*ParseTaskId("worker:2")).info.address(), "h:5");

  r.AdmitWorkersUpTo(5);
  TaskInfo w4 = Info("worker:4", 10);
  w4.set_address("h:7");
  EXPECT_EQ(r.Register(w4).status().code(), absl::StatusCode::kUnavailable);  // worker:3 first
}

TEST(TaskRegistryJoinTest, ALeavingHeartbeatIsRecordedAndValidated) {
  FakeClock clock;
  TaskRegistry r(Spec(), absl::Seconds(10), &clock);
  ASSERT_TRUE(r.Register(Info("worker:1", 5)).ok());
  HeartbeatRequest beat;
  *beat.mutable_task() = *ParseTaskId("worker:1");
  beat.set_incarnation(5);
  beat.set_leaving(true);
  beat.set_step(-3);
  EXPECT_EQ(r.Heartbeat(beat).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(r.Get(*ParseTaskId("worker:1")).left);
  beat.set_step(42);
  ASSERT_TRUE(r.Heartbeat(beat).ok());
  EXPECT_TRUE(r.Get(*ParseTaskId("worker:1")).left);
  EXPECT_EQ(r.Get(*ParseTaskId("worker:1")).left_at_step, 42);
  ASSERT_TRUE(r.Register(Info("worker:1", 6)).ok());  // back with a new process
  EXPECT_FALSE(r.Get(*ParseTaskId("worker:1")).left);
}

}  // namespace
}  // namespace psrt
