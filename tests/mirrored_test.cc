// multi_worker_mirrored end to end, through the local launcher: real worker
// processes holding replicas, a TCP ring all-reduce between them, a worker
// SIGKILLed and one SIGSTOPped for longer than the collective deadline; and
// mirrored { devices: 2 } on one worker.
#include <dirent.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <thread>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/plan/job_planner.h"
#include "common/cluster_spec.h"
#include "common/snapshot/snapshot_store.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.grpc.pb.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

// The mirrored MLP example, whole (15 epochs: the accuracy bar needs them),
// with a short collective deadline so a stopped worker is noticed quickly.
std::string WriteJob(const std::string& dir, const std::string& example, int sync_wait_ms = 0) {
  auto job = LoadJob(testing::RunfilePath(example));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return "";
  if (job->strategy().has_multi_worker_mirrored()) {
    job->mutable_strategy()->mutable_multi_worker_mirrored()->set_collective_timeout_ms(2000);
  }
  if (sync_wait_ms > 0) job->mutable_failure()->set_sync_wait_for_worker_ms(sync_wait_ms);
  job->clear_summary_path();
  job->clear_log_dir();
  return testing::WriteJobFile(*job, dir + ".pbtxt");
}

// The pid of the process whose command line holds both strings, or -1.
pid_t PidOf(const std::string& a, const std::string& b) {
  DIR* d = opendir("/proc");
  pid_t found = -1;
  while (dirent* e = readdir(d)) {
    if (!isdigit(e->d_name[0])) continue;
    std::ifstream f(absl::StrCat("/proc/", e->d_name, "/cmdline"));
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(a) != std::string::npos && cmd.find(b) != std::string::npos) found = std::stoi(e->d_name);
  }
  closedir(d);
  return found;
}

struct Result {
  double accuracy = -1;
  int failures = -1;
  std::string dir;
};

double Field(const std::string& summary, const std::string& pattern) { return testing::SummaryNumber(summary, pattern); }

// Runs the launcher to the end; `during` may act on it while it runs.
Result RunLauncher(const std::string& name, std::vector<std::string> extra,
           const std::function<void(testing::Daemon*, const std::string& dir)>& during = nullptr,
           int sync_wait_ms = 0) {
  Result r;
  r.dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  const bool devices = name == "devices";
  const std::string job =
      WriteJob(r.dir, devices ? "examples/fashion_mnist_mlp_devices.pbtxt" : "examples/fashion_mnist_mlp_mirrored.pbtxt",
               sync_wait_ms);
  std::vector<std::string> argv = {testing::RunfilePath("deploy/local_cluster"), "--job=" + job,
                                   "--run_dir=" + r.dir,
                                   devices ? "--strategy=mirrored" : "--strategy=multi_worker_mirrored", "--workers=2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto launcher = testing::Daemon::Start(name, argv);
  EXPECT_TRUE(launcher.ok()) << launcher.status();
  if (!launcher.ok()) return r;
  if (during) during(launcher->get(), r.dir);
  auto status = (*launcher)->Wait(absl::Minutes(6));
  EXPECT_TRUE(status.ok() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << (status.ok() ? DescribeWaitStatus(*status) : std::string(status.status().message()));
  std::ifstream in(r.dir + "/summary.json");
  std::stringstream ss;
  ss << in.rdbuf();
  r.accuracy = Field(ss.str(), "\"accuracy\": ([0-9.]+)");
  r.failures = static_cast<int>(Field(ss.str(), "\"failures_survived\": ([0-9]+)"));
  std::cerr << "FIGURE: " << name << " accuracy " << r.accuracy << " failures_survived " << r.failures
            << " summary " << ss.str() << std::endl;
  return r;
}

// The final checkpoint of a mirrored job: each replica wrote its share
// (1/N of the state), the shares together hold every variable once, each
// updated once a step.
void ExpectSharesOfTheState(const std::string& checkpoints, int64_t step) {
  std::map<std::string, int> seen;
  for (const char* replica : {"worker-0", "worker-1"}) {
    auto store = SnapshotStore::OpenReadOnly(checkpoints + "/" + replica);
    ASSERT_TRUE(store.ok()) << store.status();
    auto snap = (*store)->Read(step);
    ASSERT_TRUE(snap.ok()) << snap.status();
    EXPECT_GE(snap->variables.size(), 1u) << replica << " wrote nothing";
    for (const VariableState& v : snap->variables) {
      ++seen[v.def.name()];
      EXPECT_EQ(v.updates, step) << v.def.name() << ": one update a step";
    }
  }
  EXPECT_EQ(seen.size(), 6u);  // 3 dense layers: kernels and biases
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name << " written by " << n << " replicas";
}

// Pulls every variable from both workers' replicas at once, until both
// answer at the same global step (steps take milliseconds), and compares
// the bytes.
void ExpectLiveReplicasBitIdentical(const std::string& dir, const std::string& job_path) {
  auto spec = ClusterSpec::FromJsonFile(dir + "/cluster.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto job = LoadJob(job_path);
  ASSERT_TRUE(job.ok());
  auto plan = PlanJob(*job, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  PullRequest req;
  for (const VariablePlacement& vp : plan->placement.variable()) req.add_variable(vp.variable().name());
  req.set_worker(-1);
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs;
  for (int w = 0; w < 2; ++w) {
    stubs.push_back(ParameterServer::NewStub(grpc::CreateChannel(
        *spec->AddressOf(MakeTaskId("worker", w)), grpc::InsecureChannelCredentials())));
  }
  for (int attempt = 0; attempt < 500; ++attempt) {
    // A replica's Pull sees whole steps only (reads_see_whole_steps): the
    // values it returns are those of the step it reports.
    std::vector<PullResponse> resp(2);
    std::vector<grpc::Status> st(2);
    std::vector<std::thread> pulls;
    for (int w = 0; w < 2; ++w) {
      pulls.emplace_back([&, w] {
        grpc::ClientContext sctx;
        PsStatusResponse status;
        st[w] = stubs[w]->Status(&sctx, PsStatusRequest(), &status);
        if (!st[w].ok()) return;
        PullRequest r = req;
        r.set_generation(status.generation());
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        st[w] = stubs[w]->Pull(&ctx, r, &resp[w]);
      });
    }
    for (std::thread& t : pulls) t.join();
    if (!st[0].ok() || !st[1].ok() || resp[0].global_step() != resp[1].global_step()) continue;
    ASSERT_EQ(resp[0].tensor_size(), req.variable_size());
    ASSERT_EQ(resp[1].tensor_size(), req.variable_size());
    for (int i = 0; i < resp[0].tensor_size(); ++i) {
      EXPECT_EQ(resp[0].tensor(i).name(), resp[1].tensor(i).name());
      EXPECT_TRUE(resp[0].tensor(i).SerializeAsString() == resp[1].tensor(i).SerializeAsString())
          << resp[0].tensor(i).name() << " differs between the replicas at step " << resp[0].global_step();
    }
    std::cerr << "FIGURE: replicas compared at global step " << resp[0].global_step() << " (attempt " << attempt
              << ")" << std::endl;
    return;
  }
  ADD_FAILURE() << "never caught both replicas at the same step";
}

TEST(MirroredTest, TrainsToTheBarAndSurvivesAWorkerKilledAndOneStopped) {
  // Unfailed: the bar, replicas bit-identical while training, and each
  // writing half of the final checkpoint.
  Result clean = RunLauncher("clean", {}, [](testing::Daemon* l, const std::string& dir) {
    ASSERT_TRUE(l->WaitForLine("checkpoint of step 2", absl::Minutes(3)));
    ExpectLiveReplicasBitIdentical(dir, dir + ".pbtxt");
  });
  EXPECT_GE(clean.accuracy, 0.8833);
  EXPECT_EQ(clean.failures, 0);
  ExpectSharesOfTheState(clean.dir + "/checkpoints", 7035);

  // worker:1 SIGKILLed mid-run (mid-collective: every step is one): the
  // survivor's all-reduce fails at once, the launcher restarts worker:1, the
  // chief re-forms the group from the last checkpoint.
  Result killed = RunLauncher("killed", {"--kill=worker:1@3000"}, [](testing::Daemon* l, const std::string&) {
    EXPECT_TRUE(l->WaitForLine("killed worker:1 with SIGKILL", absl::Minutes(3)));
    EXPECT_TRUE(l->WaitForLine("recovered to the checkpoint", absl::Minutes(2)));
  });
  EXPECT_GE(killed.failures, 1);
  EXPECT_NEAR(killed.accuracy, clean.accuracy, 0.01);
  ExpectSharesOfTheState(killed.dir + "/checkpoints", 7035);

  // worker:1 SIGSTOPped past the collective deadline (2 s): worker:0's
  // all-reduce fails with a deadline instead of hanging; after SIGCONT the
  // group is re-formed and the job finishes.
  Result stopped = RunLauncher("stopped", {}, [](testing::Daemon* l, const std::string& dir) {
    ASSERT_TRUE(l->WaitForLine("checkpoint of step 2", absl::Minutes(3)));
    pid_t pid = PidOf(dir + "/", "--task=worker:1");
    ASSERT_GT(pid, 0);
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    const absl::Time stopped_at = absl::Now();
    bool noticed = l->WaitForLine("no progress", absl::Minutes(1));
    const absl::Duration noticed_after = absl::Now() - stopped_at;
    ::kill(pid, SIGCONT);
    ASSERT_TRUE(noticed) << "worker:0 never gave up on the stopped worker";
    std::cerr << "FIGURE: stopped worker noticed after " << absl::FormatDuration(noticed_after) << std::endl;
    EXPECT_GE(noticed_after, absl::Milliseconds(1500));
    EXPECT_TRUE(l->WaitForLine("recovered to the checkpoint", absl::Minutes(2)));
  });
  EXPECT_GE(stopped.failures, 1);
  EXPECT_NEAR(stopped.accuracy, clean.accuracy, 0.01);
}

// A member that stays away longer than failure.sync_wait_for_worker_ms
// (3 s here) is removed and the group re-formed without it from the last
// checkpoint; one that answers again is taken back (the group's progress
// checkpointed first). Both runs finish every step at the bar.
TEST(MirroredTest, AWorkerGoneForGoodShrinksTheGroupAndOneThatReturnsGrowsIt) {
  Result removed = RunLauncher(
      "removed", {"--remove=worker:1@3000"},
      [](testing::Daemon* l, const std::string&) {
        EXPECT_TRUE(l->WaitForLine("removed worker:1 for good", absl::Minutes(3)));
        EXPECT_TRUE(l->WaitForLine("the collective group shrinks to 1", absl::Minutes(1)));
        EXPECT_TRUE(l->WaitForLine("recovered to the checkpoint", absl::Minutes(1)));
      },
      /*sync_wait_ms=*/3000);
  EXPECT_GE(removed.failures, 1);
  EXPECT_GE(removed.accuracy, 0.8833);

  Result back = RunLauncher(
      "back", {},
      [](testing::Daemon* l, const std::string& dir) {
        ASSERT_TRUE(l->WaitForLine("checkpoint of step 2", absl::Minutes(3)));
        pid_t pid = PidOf(dir + "/", "--task=worker:1");
        ASSERT_GT(pid, 0);
        ASSERT_EQ(::kill(pid, SIGSTOP), 0);
        const bool shrank = l->WaitForLine("the collective group shrinks to 1", absl::Minutes(1));
        ::kill(pid, SIGCONT);
        ASSERT_TRUE(shrank) << "the group never went on without the stopped worker";
        EXPECT_TRUE(l->WaitForLine("worker:1 is back: the collective group grows to 2", absl::Minutes(1)));
      },
      /*sync_wait_ms=*/3000);
  EXPECT_GE(back.failures, 1);
  EXPECT_GE(back.accuracy, 0.8833);
  // Both members wrote their share of the final checkpoint again.
  ExpectSharesOfTheState(back.dir + "/checkpoints", 7035);
}

// mirrored { devices: 2 }: one worker, two device replicas splitting each
// batch, reduced locally; the same bar as the other strategies.
TEST(MirroredTest, TwoLocalDevicesTrainToTheBar) {
  Result r = RunLauncher("devices", {});
  EXPECT_GE(r.accuracy, 0.8833);
  EXPECT_EQ(r.failures, 0);
  std::ifstream log(r.dir + "/cluster.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("starts steps [0, 14070) on 2 x cpu"), std::string::npos)
      << "worker:0 did not run two device replicas";
}

// A checkpoint taken under one strategy restored under another: 2 PS (SYNC)
// to 2 mirrored workers, then back onto 3 PS. Each run continues where the
// last one's final checkpoint left it.
TEST(MirroredTest, ACheckpointMovesBetweenStrategiesAndPsCounts) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/switch");
  auto base = LoadJob(testing::RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
  ASSERT_TRUE(base.ok()) << base.status();
  base->set_epochs(0);
  base->mutable_consistency()->set_mode(ConsistencyDef::SYNC);  // one update a step, as mirrored
  base->mutable_checkpoint()->set_every_steps(1000);
  base->mutable_eval()->set_every_steps(0);
  base->mutable_eval()->set_max_examples(2000);
  base->clear_summary_path();
  base->clear_log_dir();
  struct Leg {
    std::string strategy;
    int64_t steps;
    std::vector<std::string> flags;
    int64_t restored_from;
  };
  const std::vector<Leg> legs = {{"parameter_server", 1500, {"--ps=2"}, -1},
                                 {"multi_worker_mirrored", 3000, {}, 1500},
                                 {"parameter_server", 4500, {"--ps=3"}, 3000}};
  double first_loss = 0;
  for (size_t i = 0; i < legs.size(); ++i) {
    const Leg& leg = legs[i];
    TrainingJob job = *base;
    job.set_steps(leg.steps);
    if (leg.strategy == "multi_worker_mirrored") job.mutable_strategy()->mutable_multi_worker_mirrored();
    std::vector<std::string> flags = {"--strategy=" + leg.strategy, "--workers=2"};
    flags.insert(flags.end(), leg.flags.begin(), leg.flags.end());
    const std::string s = testing::RunLauncherLeg(absl::StrCat("leg", i), job, dir, flags, leg.restored_from >= 0);
    ASSERT_FALSE(s.empty()) << "leg " << i;
    EXPECT_EQ(Field(s, "\"restored_from_step\": (-?[0-9]+)"), leg.restored_from) << "leg " << i;
    EXPECT_EQ(Field(s, "\"steps\": ([0-9]+)"), leg.steps) << "leg " << i;
    EXPECT_GE(Field(s, "\"accuracy\": ([0-9.]+)"), 0.84) << "leg " << i;
    // Training went on from the restored values, not from scratch: each leg
    // ends below the first leg's loss (0.338 vs 0.319 and 0.311 measured).
    const double loss = Field(s, "\"loss\": ([0-9.]+)");
    if (i == 0) first_loss = loss;
    if (i > 0) EXPECT_LT(loss, first_loss) << "leg " << i;
  }
}

}  // namespace
}  // namespace psrt
