#include "chief/core/watch_core.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

WatchState TwoPsTwoWorkers() {
  WatchState s;
  s.ps.resize(2);
  s.ps[0].name = "ps:0";
  s.ps[1].name = "ps:1";
  s.ps[0].incarnation = 11;
  s.ps[1].incarnation = 12;
  s.ps_lost.assign(2, false);
  s.workers.resize(2);
  for (int i = 0; i < 2; ++i) {
    s.workers[i].name = "worker:" + std::to_string(i);
    s.workers[i].incarnation = 21 + i;
    s.workers[i].state = WorkerStatusResponse::RUNNING;
    s.workers[i].reachable = true;
    s.workers[i].streams = {StreamPos{i, 0}};
  }
  s.generation = 5;
  s.end_step = 100;
  s.last_checkpoint_step = 0;
  s.last_checkpoint_time = kT0;
  return s;
}

std::optional<PsProbe> Answer(uint64_t incarnation, int64_t generation) {
  PsProbe p;
  p.asked = kT0;
  p.answer.set_incarnation(incarnation);
  p.answer.set_generation(generation);
  return p;
}

std::optional<PsProbe> Silent(absl::StatusCode code) {
  PsProbe p;
  p.asked = kT0;
  p.error = absl::Status(code, "no answer");
  return p;
}

std::optional<WorkerProbe> Worker(uint64_t incarnation, WorkerStatusResponse::State state, int64_t step) {
  WorkerProbe p;
  p.answer.set_incarnation(incarnation);
  p.answer.set_state(state);
  p.answer.set_step(step);
  return p;
}

const WatchCommand* Ending(const std::vector<WatchCommand>& commands) {
  return !commands.empty() && commands.back().EndsPass() ? &commands.back() : nullptr;
}

TEST(WatchCoreTest, APsWithANewIncarnationIsARecovery) {
  WatchCore core{WatchRules()};
  WatchState s = TwoPsTwoWorkers();
  const PsPass pass = core.DecideStores({Answer(11, 5), Answer(99, 0)}, kT0, &s);
  const WatchCommand* c = Ending(pass.commands);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->kind, WatchCommand::kRecover);
  EXPECT_NE(c->why.find("ps:1 restarted"), std::string::npos) << c->why;
}

TEST(WatchCoreTest, ReplicatedAPsTimingOutOnceIsNotFailedOverTwiceIs) {
  WatchRules rules;
  rules.replicated = true;
  WatchCore core{rules};
  WatchState s = TwoPsTwoWorkers();
  PsPass pass = core.DecideStores({Answer(11, 5), Silent(absl::StatusCode::kDeadlineExceeded)},
                                  kT0 + absl::Seconds(1), &s);
  EXPECT_EQ(Ending(pass.commands), nullptr) << "one slow answer on a loaded host is not a death";
  EXPECT_FALSE(pass.all_answer);
  pass = core.DecideStores({Answer(11, 5), Silent(absl::StatusCode::kDeadlineExceeded)}, kT0 + absl::Seconds(2), &s);
  ASSERT_NE(Ending(pass.commands), nullptr);
  EXPECT_EQ(Ending(pass.commands)->kind, WatchCommand::kFailover);
  EXPECT_EQ(Ending(pass.commands)->index, 1);
}

TEST(WatchCoreTest, AJobWithNoMemberIsNotDone) {
  WatchCore core{WatchRules()};
  WatchState s = TwoPsTwoWorkers();
  for (WorkerRecord& w : s.workers) w.removed = w.left = true;
  const WorkerPass pass = core.DecideWorkers({std::nullopt, std::nullopt}, true, kT0, &s);
  EXPECT_FALSE(core.DecideNext(pass.all_done, true, kT0, s).done);
}

TEST(WatchCoreTest, EveryMemberDoneIsDone) {
  WatchCore core{WatchRules()};
  WatchState s = TwoPsTwoWorkers();
  const WorkerPass pass =
      core.DecideWorkers({Worker(21, WorkerStatusResponse::DONE, 100), Worker(22, WorkerStatusResponse::DONE, 100)},
                         true, kT0, &s);
  EXPECT_TRUE(pass.all_done);
  EXPECT_TRUE(core.DecideNext(pass.all_done, true, kT0, s).done);
}

TEST(WatchCoreTest, ARestartedSyncWorkerStartsAtTheGroupsStep) {
  WatchRules rules;
  rules.sync = true;
  WatchCore core{rules};
  WatchState s = TwoPsTwoWorkers();
  s.workers[0].step = 40;
  s.workers[1].step = 42;
  const WorkerPass pass =
      core.DecideWorkers({Worker(21, WorkerStatusResponse::RUNNING, 40), Worker(77, WorkerStatusResponse::IDLE, 0)},
                         true, kT0, &s);
  bool started = false;
  for (const WatchCommand& c : pass.commands) {
    if (c.kind != WatchCommand::kStartWorker) continue;
    started = true;
    EXPECT_EQ(c.index, 1);
    EXPECT_EQ(c.step, 40);
  }
  EXPECT_TRUE(started);
}

TEST(WatchCoreTest, ASilentAsyncWorkerIsGivenUpOnAfterTheHeartbeatTimeout) {
  WatchCore core{WatchRules()};
  WatchState s = TwoPsTwoWorkers();
  WorkerProbe down;
  down.error = absl::UnavailableError("connection refused");
  WorkerPass pass = core.DecideWorkers({Worker(21, WorkerStatusResponse::RUNNING, 5), down}, true, kT0, &s);
  EXPECT_EQ(Ending(pass.commands), nullptr);
  pass = core.DecideWorkers({Worker(21, WorkerStatusResponse::RUNNING, 9), down}, true, kT0 + absl::Seconds(11), &s);
  ASSERT_NE(Ending(pass.commands), nullptr);
  EXPECT_EQ(Ending(pass.commands)->kind, WatchCommand::kChangeMembership);
  EXPECT_TRUE(s.workers[1].removed);
}

// The group's step at a membership change: the paused members' word, not
// a lost worker's lagging record.
TEST(WatchCoreTest, TheGroupStepIsThePausedMembersNotALaggingRecord) {
  WatchState s = TwoPsTwoWorkers();
  s.workers[0].step = 8;  // lost after pushing step 8: recorded at 8
  s.workers[0].removed = true;
  s.workers[1].step = 9;  // paused: step 8 was applied
  EXPECT_EQ(GroupStep(s.workers, {false, true}, s.end_step), 9);
  EXPECT_EQ(GroupStep(s.workers, {false, false}, s.end_step), 8);
}

// A restore deals the checkpoint's stream positions: a member keeps what
// it held; the leaver's go to it; a record that reads the same from its
// step is kept (and may resume).
TEST(WatchCoreTest, RestoreStreamsDealsTheCheckpointsPositions) {
  WatchState s = TwoPsTwoWorkers();
  s.workers[1].removed = true;  // left at step 620: its stream went to worker:0
  s.workers[1].streams.clear();
  s.workers[0].step = 600;
  s.workers[0].streams = {StreamPos{0, 620}, StreamPos{1, 610}};  // dealt at step 620
  s.workers[0].stream_base = 620;
  std::map<int, std::vector<StreamPos>> saved = {{0, {StreamPos{0, 600}}}, {1, {StreamPos{1, 598}}}};
  absl::StatusOr<std::vector<int>> changed = RestoreStreams(2, saved, &s.workers);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, std::vector<int>({0}));
  EXPECT_EQ(s.workers[0].streams, (std::vector<StreamPos>{{0, 600}, {1, 598}}));
  EXPECT_EQ(s.workers[0].stream_base, 600);
  EXPECT_TRUE(s.workers[1].streams.empty());

  // The same again: nothing to change, every worker resumes.
  changed = RestoreStreams(2, saved, &s.workers);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(changed->empty());
}

TEST(WatchCoreTest, RestoreStreamsRefusesPositionsNoCheckpointHolds) {
  WatchState s = TwoPsTwoWorkers();
  const WatchState before = s;
  EXPECT_FALSE(RestoreStreams(2, {{0, {StreamPos{0, -1}}}}, &s.workers).ok());
  EXPECT_FALSE(RestoreStreams(2, {{0, {StreamPos{5, 0}}}}, &s.workers).ok());
  EXPECT_FALSE(RestoreStreams(2, {{0, {StreamPos{0, 0}}}, {1, {StreamPos{0, 3}}}}, &s.workers).ok());
  EXPECT_FALSE(RestoreStreams(2, {{7, {StreamPos{0, 0}}}}, &s.workers).ok());
  EXPECT_EQ(s.workers[0].streams, before.workers[0].streams);
  EXPECT_EQ(s.workers[1].streams, before.workers[1].streams);
}

std::optional<PsProbe> Applied(uint64_t incarnation, int64_t generation, std::map<int, int64_t> streams) {
  std::optional<PsProbe> p = Answer(incarnation, generation);
  for (const auto& [stream, batch] : streams) (*p->answer.mutable_stream_next_batch())[stream] = batch;
  return p;
}

int64_t StartStep(const std::vector<WatchCommand>& commands) {
  for (const WatchCommand& c : commands) {
    if (c.kind == WatchCommand::kStartWorker) return c.step;
  }
  return -1;
}

TEST(WatchCoreTest, AKilledAsyncWorkerIsRestartedAfterWhatEveryStoreApplied) {
  WatchCore core{WatchRules()};
  WatchState s = TwoPsTwoWorkers();
  s.workers[1].step = 40;  // its record; it pushed more before it died
  const WorkerPass pass = core.DecideWorkers(
      {Worker(21, WorkerStatusResponse::RUNNING, 40), Worker(77, WorkerStatusResponse::IDLE, 0)}, true, kT0, &s);
  ASSERT_EQ(pass.commands.size(), 1u);
  EXPECT_EQ(pass.commands[0].kind, WatchCommand::kRestartWorker);
  EXPECT_FALSE(pass.commands[0].EndsPass());
  // ps:0 took step 43 (batch 43 of stream 1), ps:1 did not: 43 is pushed again.
  EXPECT_EQ(StartStep(core.DecideRestart(1, {Applied(11, 5, {{1, 44}}), Applied(12, 5, {{1, 43}})}, &s)), 43);
  EXPECT_EQ(StartStep(core.DecideRestart(1, {Applied(11, 5, {{1, 44}}), Applied(12, 5, {{1, 44}})}, &s)), 44);
  // A store with no word of the stream (none since the restore): the record.
  EXPECT_EQ(StartStep(core.DecideRestart(1, {Applied(11, 5, {{1, 44}}), Applied(12, 5, {})}, &s)), 40);
  // Never below the record, never past the end.
  EXPECT_EQ(StartStep(core.DecideRestart(1, {Applied(11, 5, {{1, 10}}), Applied(12, 5, {{1, 10}})}, &s)), 40);
  EXPECT_EQ(StartStep(core.DecideRestart(1, {Applied(11, 5, {{1, 500}}), Applied(12, 5, {{1, 500}})}, &s)), 100);
}

TEST(WatchCoreTest, ARestartBelievesOnlyTheStoresItKnows) {
  WatchCore core{WatchRules()};
  WatchState s = TwoPsTwoWorkers();
  s.workers[1].step = 40;
  PsProbe silent;
  silent.error = absl::UnavailableError("connection refused");
  // Not now: the next pass asks again.
  EXPECT_TRUE(core.DecideRestart(1, {Applied(11, 5, {{1, 44}}), silent}, &s).empty());
  EXPECT_TRUE(core.DecideRestart(1, {Applied(11, 5, {{1, 44}}), Applied(99, 5, {{1, 44}})}, &s).empty());
  EXPECT_TRUE(core.DecideRestart(1, {Applied(11, 5, {{1, 44}}), Applied(12, 4, {{1, 44}})}, &s).empty());
  // A store not watched is not asked.
  EXPECT_EQ(StartStep(core.DecideRestart(1, {Applied(11, 5, {{1, 44}}), std::nullopt}, &s)), 44);
  // A peer's nonsense: its record (the stores' dedupe still holds).
  for (const std::vector<std::optional<PsProbe>>& probes : std::vector<std::vector<std::optional<PsProbe>>>{
           {Applied(11, 5, {{1, 44}}), Applied(12, 5, {{1, -3}})},           // a negative batch
           {Applied(11, 5, {{1, 44}}), Applied(12, 5, {{1, 44}, {-1, 2}})},  // a negative stream
       }) {
    EXPECT_EQ(StartStep(core.DecideRestart(1, probes, &s)), 40);
  }
  EXPECT_TRUE(core.DecideRestart(7, {}, &s).empty());  // no such worker
}

TEST(WatchCoreTest, StoresAgreeOnStreamsOnlyWhenTheyAppliedTheSameBatches) {
  std::string why;
  EXPECT_TRUE(StoresAgreeOnStreams({Applied(11, 5, {{0, 3}, {1, 4}}), Applied(12, 5, {{0, 3}, {1, 4}})}, &why));
  EXPECT_FALSE(StoresAgreeOnStreams({Applied(11, 5, {{0, 3}, {1, 5}}), Applied(12, 5, {{0, 3}, {1, 4}})}, &why));
  EXPECT_FALSE(StoresAgreeOnStreams({Applied(11, 5, {{0, 3}, {1, 4}}), Applied(12, 5, {{0, 3}})}, &why));
  EXPECT_FALSE(StoresAgreeOnStreams({Applied(11, 5, {{0, 3}}), Applied(12, 5, {{0, 3}, {1, 4}})}, &why));
}

}  // namespace
}  // namespace psrt
