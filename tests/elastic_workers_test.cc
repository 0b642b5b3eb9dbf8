// Workers joining and leaving a running job (job.failure.max_workers), with
// real processes: the chief, a PS and two workers of the spec train the
// Fashion-MNIST MLP; a third worker the spec does not name joins with a
// TF_CONFIG of its own (the form Kubeflow's TFJob and a scaled StatefulSet
// give a new pod: the cluster listing more workers, its own task index),
// then worker:0 is stopped by its "operator" (SIGTERM) and leaves for good.
//
// Every worker logs the (data stream, batch) of each step it pushed
// (--data_log). The test checks the exact accounting the design promises:
// each stream's batches were trained exactly once, in one unbroken run
// from batch 0, across both changes; so within an epoch of a stream no
// example was skipped or read twice. Under SYNC a step half gathered when
// the group changed is dropped by the PS and redone by the new group from
// the step the chief names ("goes on at step T ... generation G"): pushes
// of an older generation at or after T are not counted; nor is a step a
// worker pushed twice in one generation (a SYNC worker sent back to the
// group's step by a checkpoint's pause), which the PS took as a duplicate.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/rpc/channel_cache.h"
#include "common/rpc/unary_call.h"
#include "proto/chief_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace testing {
namespace {

constexpr int kSteps = 1400;

class ElasticWorkersTest : public TrainingClusterTest {
 protected:
  // Three workers at most, the chief's spec naming two (worker:2 is the
  // joiner's address); returns the spec naming all three.
  std::string SetupElastic(ConsistencyDef::Mode mode) {
    Setup(/*ps=*/1, /*workers=*/3, mode, /*steps=*/kSteps);
    const std::string full = cluster_.spec_path;
    std::ofstream(dir_ + "-spec2.json") << "{\"cluster\": {\"chief\": [\"" << cluster_.chief << "\"], \"ps\": [\""
                                        << cluster_.ps[0] << "\"], \"worker\": [\"" << cluster_.workers[0] << "\", \""
                                        << cluster_.workers[1] << "\"]}}";
    cluster_.spec_path = dir_ + "-spec2.json";
    job_.mutable_failure()->set_max_workers(3);
    job_.mutable_failure()->set_heartbeat_timeout_ms(20000);
    job_.mutable_checkpoint()->set_every_steps(250);
    return full;
  }

  // worker:2, with TF_CONFIG as a TFJob or StatefulSet writes it for the new pod.
  std::unique_ptr<Daemon> StartJoiner(const std::string& full, std::vector<std::string> extra) {
    std::vector<std::string> argv = {"/usr/bin/env", TfConfig(full, "worker", 2), RunfilePath("worker/main"),
                                     "--threads=1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto joiner = Daemon::Start("worker:2", argv);
    EXPECT_TRUE(joiner.ok()) << joiner.status();
    return joiner.ok() ? *std::move(joiner) : nullptr;
  }

  void Run(ConsistencyDef::Mode mode) {
    // Room after the join for the leave: on a quiet machine ASYNC runs ~230
    // steps a second and a joiner's warm-up took until step 572 of 700 once,
    // so worker:0 had finished before its SIGTERM.
    const std::string full = SetupElastic(mode);
    // Bounded: the PS must wait for the workers training, by index (after
    // worker:0 leaves, workers 1 and 2), not for the leaver's old step.
    if (mode == ConsistencyDef::BOUNDED_STALENESS) job_.mutable_consistency()->set_staleness(2);
    WriteJob();
    auto log = [this](int i) { return absl::StrCat("--data_log=", dir_, "-data-", i, ".log"); };
    auto ps = StartPs(0);
    auto w0 = StartWorker(0, {log(0)});
    auto w1 = StartWorker(1, {log(1)});
    auto chief = StartChief();
    ASSERT_TRUE(chief && w0 && w1 && ps);

    ASSERT_TRUE(WaitForStep(chief.get(), 150));
    auto joiner = StartJoiner(full, {log(2)});
    ASSERT_TRUE(joiner);
    ASSERT_TRUE(chief->WaitForLine("membership: worker:2 joins", absl::Minutes(1)));

    ASSERT_TRUE(WaitForStep(chief.get(), 350));
    ASSERT_TRUE(w0->Kill(SIGTERM));
    ASSERT_TRUE(chief->WaitForLine("membership: worker:0 leaves at step", absl::Minutes(1)));
    EXPECT_EQ(ExitCode(w0.get(), absl::Minutes(1)), 0);

    EXPECT_EQ(ExitCode(chief.get()), 0);
    const std::string summary = Summary();
    EXPECT_GE(Field(summary, "steps"), kSteps) << summary;

    // The chief's word on each change: the pause, and (SYNC) where the new
    // group went on.
    std::vector<std::pair<int64_t, int64_t>> restarts;  // (generation, step)
    std::vector<int64_t> paused_ms;
    std::vector<std::string> changes;
    for (size_t k = 0; k < chief->lines(); ++k) {
      std::string line = chief->WaitForMatch("^membership: .*training paused for", absl::ZeroDuration(), k);
      if (line.empty()) break;
      if (std::find(changes.begin(), changes.end(), line) == changes.end()) changes.push_back(line);
    }
    for (const std::string& line : changes) {
      std::smatch m;
      ASSERT_TRUE(std::regex_search(line, m, std::regex("training paused for ([0-9]+) ms")));
      paused_ms.push_back(std::stoll(m[1]));
      if (std::regex_search(line, m, std::regex("goes on at step ([0-9]+) \\(generation ([0-9]+)\\)"))) {
        restarts.emplace_back(std::stoll(m[2]), std::stoll(m[1]));
      }
    }
    ASSERT_FALSE(paused_ms.empty());
    std::cerr << "FIGURE: " << ConsistencyDef::Mode_Name(mode) << " membership change pauses (ms): "
              << absl::StrJoin(paused_ms, " ") << std::endl;

    // Every stream's batches, trained once each, from 0 without a gap.
    std::map<int, std::multiset<int64_t>> trained;
    // Per worker: generation -> (first, last) push time, for the pauses.
    std::map<int, std::map<int64_t, std::pair<int64_t, int64_t>>> times;
    for (int i = 0; i < 3; ++i) {
      std::ifstream f(absl::StrCat(dir_, "-data-", i, ".log"));
      int64_t generation, step, stream, batch, ms;
      // A SYNC worker sent back to the group's step by a checkpoint's pause
      // pushes a step again, the same batch, which the PS takes as a
      // duplicate: one step of one worker's generation counts once.
      std::set<std::pair<int64_t, int64_t>> pushed;
      while (f >> generation >> step >> stream >> batch >> ms) {
        auto [it, fresh] = times[i].try_emplace(generation, ms, ms);
        if (!fresh) it->second.second = ms;
        if (!pushed.insert({generation, step}).second) continue;
        bool dropped = false;
        for (auto [g, t] : restarts) dropped |= generation < g && step >= t;
        if (dropped) continue;
        trained[stream].insert(batch);
      }
    }
    // Each change (a new generation): how long no worker pushed, and the
    // longest any one worker went without pushing (one step's compute
    // included), from its last push before to its first after.
    std::set<int64_t> generations;
    for (auto& [i, by_gen] : times) {
      for (auto& [g, t] : by_gen) generations.insert(g);
    }
    for (auto g = std::next(generations.begin()); g != generations.end(); ++g) {
      int64_t last_before = 0, first_after = INT64_MAX, worst = 0;
      for (auto& [i, by_gen] : times) {
        auto after = by_gen.find(*g);
        auto before = by_gen.find(*std::prev(g));
        if (after != by_gen.end()) first_after = std::min(first_after, after->second.first);
        if (before != by_gen.end()) last_before = std::max(last_before, before->second.second);
        if (after != by_gen.end() && before != by_gen.end()) {
          worst = std::max(worst, after->second.first - before->second.second);
        }
      }
      std::cerr << "FIGURE: " << ConsistencyDef::Mode_Name(mode) << " change at generation " << *g
                << ": no worker pushed for " << first_after - last_before << " ms; the longest gap of one worker "
                << worst << " ms" << std::endl;
    }
    EXPECT_EQ(trained.size(), 3u) << "three data streams (max_workers)";
    const int64_t total = ExpectEachBatchOnce(trained);
    std::cerr << "FIGURE: " << ConsistencyDef::Mode_Name(mode) << " batches trained " << total << " over "
              << trained.size() << " streams, each once" << std::endl;
  }
};

TEST_F(ElasticWorkersTest, AsyncJoinAndLeaveReadEveryBatchOnce) { Run(ConsistencyDef::ASYNC); }

TEST_F(ElasticWorkersTest, SyncJoinAndLeaveReadEveryBatchOnce) { Run(ConsistencyDef::SYNC); }

TEST_F(ElasticWorkersTest, BoundedStalenessJoinAndLeaveReadEveryBatchOnce) {
  Run(ConsistencyDef::BOUNDED_STALENESS);
}

// The batches of each stream in the --data_log files `logs`: each must have
// been trained once, from 0 without a gap (ASYNC, where the changes fall on
// step boundaries).
void ExpectEveryBatchOnce(const std::vector<std::string>& logs, int64_t min_batches) {
  EXPECT_GE(ExpectEachBatchOnce(ReadDataLogs(logs)), min_batches);
}

// What an eviction does to the only worker: SIGTERM (it leaves, telling the
// chief the first step it did not push), then a new pod. The job is not
// done when its only worker leaves: it waits, the new process rejoins where
// the old one stopped, and every step is trained once.
TEST_F(ElasticWorkersTest, TheOnlyWorkerStoppedAndRestartedFinishesTheJob) {
  Setup(/*ps=*/1, /*workers=*/1, ConsistencyDef::ASYNC, /*steps=*/kSteps);
  auto log = [this](int run) { return absl::StrCat(dir_, "-data-", run, ".log"); };
  auto ps = StartPs(0);
  auto w0 = StartWorker(0, {"--data_log=" + log(0)});
  auto chief = StartChief();
  ASSERT_TRUE(chief && w0 && ps);
  ASSERT_TRUE(WaitForStep(chief.get(), 200));
  ASSERT_TRUE(w0->Kill(SIGTERM));
  ASSERT_TRUE(chief->WaitForLine("membership: worker:0 leaves at step", absl::Minutes(1)));
  EXPECT_EQ(ExitCode(w0.get(), absl::Minutes(1)), 0);
  ASSERT_TRUE(chief->WaitForLine("no worker left: training waits for one to join", absl::Minutes(1)));
  // Two progress lines since: the chief's loop went on watching the job
  // with no member (one that took it for done printed one, then ended).
  size_t from = chief->lines();
  for (int i = 0; i < 2; ++i) {
    ASSERT_FALSE(chief->WaitForMatch("step [0-9]+/", absl::Minutes(1), from).empty());
    from = chief->lines();
  }
  ASSERT_TRUE(chief->process()->Running());
  w0 = StartWorker(0, {"--data_log=" + log(1)});
  ASSERT_TRUE(w0);
  ASSERT_TRUE(chief->WaitForLine("worker:0 comes back", absl::Minutes(1)));
  EXPECT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = Summary();
  EXPECT_GE(Field(summary, "steps"), kSteps) << summary;
  ExpectEveryBatchOnce({log(0), log(1)}, kSteps);
}

// A heartbeat that says a worker leaves, sent by someone else with the
// worker's incarnation (read from its Status), while the worker trains on:
// the chief asks the worker, which still answers as the same process, so
// nothing changes and the job finishes with every batch once. Before, the
// chief dealt the worker's data away and, with it the only worker, ended a
// job of any length as done.
TEST_F(ElasticWorkersTest, ALeaveClaimedForALiveWorkerIsNotTaken) {
  Setup(/*ps=*/1, /*workers=*/1, ConsistencyDef::ASYNC, /*steps=*/kSteps);
  const std::string data_log = dir_ + "-data.log";
  auto ps = StartPs(0);
  auto w0 = StartWorker(0, {"--data_log=" + data_log});
  auto chief = StartChief();
  ASSERT_TRUE(chief && w0 && ps);
  ASSERT_TRUE(WaitForStep(chief.get(), 200));
  std::unique_ptr<Worker::Stub> worker = Worker::NewStub(MakeChannel(cluster_.workers[0], RpcOptions()));
  absl::StatusOr<WorkerStatusResponse> st =
      CallUnary(worker.get(), &Worker::Stub::Status, WorkerStatusRequest(), absl::Seconds(10), "worker:0", "Status");
  ASSERT_TRUE(st.ok()) << st.status();
  HeartbeatRequest beat;
  beat.mutable_task()->set_job("worker");
  beat.mutable_task()->set_index(0);
  beat.set_incarnation(st->incarnation());
  beat.set_step(st->step());
  beat.set_leaving(true);
  std::unique_ptr<Chief::Stub> chief_stub = Chief::NewStub(MakeChannel(cluster_.chief, RpcOptions()));
  absl::StatusOr<HeartbeatResponse> r =
      CallUnary(chief_stub.get(), &Chief::Stub::Heartbeat, beat, absl::Seconds(10), "chief", "Heartbeat");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(chief->WaitForLine("a heartbeat said worker:0 leaves, but it still answers", absl::Minutes(1)));
  EXPECT_EQ(ExitCode(chief.get()), 0);
  EXPECT_FALSE(chief->WaitForLine("membership: worker:0 leaves", absl::ZeroDuration()));
  const std::string summary = Summary();
  EXPECT_GE(Field(summary, "steps"), kSteps) << summary;
  ExpectEveryBatchOnce({data_log}, kSteps);
}

// A restore to a checkpoint taken before a membership change: worker:1
// leaves after the checkpoint (its stream goes to worker:0, read from the
// step of the change), then the PS is killed and the job goes back to the
// checkpoint. The streams must stand where the checkpoint saw them, each
// with its holder of then: before, the chief kept the deal of the change
// and counted it back to the checkpoint's step (PositionsAt before its
// base), so worker:0 skipped batches of its own stream and read the
// leaver's from the wrong place (found by the simulation,
// chief/core/cluster_sim.h; the manifest now keeps the stream positions).
TEST_F(ElasticWorkersTest, ARestoreToBeforeALeaveReadsEveryBatchOnce) {
  Setup(/*ps=*/1, /*workers=*/2, ConsistencyDef::ASYNC, /*steps=*/kSteps);
  job_.mutable_checkpoint()->set_every_steps(600);
  WriteJob();
  auto log = [this](int i) { return absl::StrCat(dir_, "-data-", i, ".log"); };
  auto ps = StartPs(0);
  auto w0 = StartWorker(0, {"--data_log=" + log(0)});
  auto w1 = StartWorker(1, {"--data_log=" + log(1)});
  auto chief = StartChief();
  ASSERT_TRUE(chief && w0 && w1 && ps);
  ASSERT_FALSE(chief->WaitForMatch("checkpoint of step [1-9][0-9]* committed", absl::Minutes(3)).empty());
  ASSERT_TRUE(w1->Kill(SIGTERM));
  ASSERT_TRUE(chief->WaitForLine("membership: worker:1 leaves at step", absl::Minutes(1)));
  ASSERT_TRUE(ps->Kill(SIGKILL));
  ASSERT_TRUE(ps->Wait(absl::Seconds(30)).ok());
  ps = StartPs(0);
  ASSERT_TRUE(ps);
  const std::string restored = chief->WaitForMatch("restored checkpoint of step", absl::Minutes(2));
  ASSERT_FALSE(restored.empty());
  EXPECT_EQ(ExitCode(chief.get()), 0);
  EXPECT_EQ(ExitCode(w1.get(), absl::Minutes(1)), 0);

  std::smatch m;
  ASSERT_TRUE(std::regex_search(restored, m, std::regex("of step ([0-9]+) .*\\(generation ([0-9]+)\\)"))) << restored;
  const int64_t step = std::stoll(m[1]), generation = std::stoll(m[2]);
  ManifestStore manifests(dir_ + "/ckpt");
  absl::StatusOr<CheckpointManifest> manifest = manifests.Read(step);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->worker_step_size(), 2);
  // What the restore kept: each worker's pushes before its step of the
  // checkpoint, and everything pushed after it.
  std::map<int64_t, std::multiset<int64_t>> trained;
  for (int i = 0; i < 2; ++i) {
    std::ifstream f(log(i));
    int64_t g, s, stream, batch, ms;
    while (f >> g >> s >> stream >> batch >> ms) {
      if (g < generation && s >= manifest->worker_step(i)) continue;  // rolled back
      trained[stream].insert(batch);
    }
  }
  EXPECT_EQ(trained.size(), 2u);
  EXPECT_GE(ExpectEachBatchOnce(trained), kSteps);
}

// A worker and the PS fail in the middle of a join: both are stopped
// (SIGSTOP) as the joiner starts, so the chief's pause of the group and its
// calls to the PS time out inside the change; then both are killed and
// restarted, as a supervisor would. The job goes on (the PS restored from
// the checkpoint, the worker registered again) and finishes.
TEST_F(ElasticWorkersTest, AWorkerAndThePsFailingDuringAJoinAreSurvived) {
  const std::string full = SetupElastic(ConsistencyDef::ASYNC);
  WriteJob();
  auto ps = StartPs(0);
  auto w0 = StartWorker(0);
  auto w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && w0 && w1 && ps);
  ASSERT_TRUE(WaitForStep(chief.get(), 300));  // past the checkpoint of step 250
  ASSERT_TRUE(w1->Kill(SIGSTOP));
  ASSERT_TRUE(ps->Kill(SIGSTOP));
  auto joiner = StartJoiner(full, {});
  ASSERT_TRUE(joiner);
  // The change is under way once the chief says anything of it: here its
  // CreateVariables on the stopped PS failing (a reconfiguration of a PS
  // that holds the variables has 5 s; it waited 26 s on gRPC's keepalive).
  ASSERT_FALSE(chief->WaitForMatch("membership", absl::Minutes(2)).empty());
  ASSERT_TRUE(w1->Kill(SIGKILL));
  ASSERT_TRUE(ps->Kill(SIGKILL));
  ASSERT_TRUE(w1->Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(ps->Wait(absl::Seconds(30)).ok());
  ps = StartPs(0);
  w1 = StartWorker(1);
  ASSERT_TRUE(ps && w1);

  EXPECT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = Summary();
  EXPECT_GE(Field(summary, "steps"), kSteps) << summary;
  EXPECT_GE(Field(summary, "failures_survived"), 1) << summary;
  EXPECT_EQ(ExitCode(w0.get(), absl::Minutes(1)), 0);
  EXPECT_EQ(ExitCode(w1.get(), absl::Minutes(1)), 0);
  EXPECT_EQ(ExitCode(joiner.get(), absl::Minutes(1)), 0);
}

}  // namespace
}  // namespace testing
}  // namespace psrt
