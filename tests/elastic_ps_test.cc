// A parameter server joining and one leaving a running job (issue #14,
// job.failure.max_ps), with real processes: the chief, two PS and two
// workers of the spec train the Fashion-MNIST MLP under ASYNC; a third PS
// the spec does not name joins with a TF_CONFIG of its own (as a scaled
// StatefulSet gives a new pod) and takes its share of the variables, then
// ps:1 is stopped by its "operator" (SIGTERM) and its variables move off
// before it exits. Workers push throughout.
//
// The count: every worker logs each step whose push was acknowledged
// (--data_log); every PS counts the pushes applied to each variable. In
// the final checkpoint each variable is held by exactly one store, and its
// count equals the acknowledged pushes: none lost in a move, none applied
// twice. A new chief then restores that checkpoint onto the spec's PS.
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/snapshot/snapshot_store.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace testing {
namespace {

constexpr int kSteps = 1400;

// "12.5ms", "1.2s", "800us" (absl::FormatDuration) in milliseconds; -1 if none.
double Millis(const std::string& d) {
  std::smatch m;
  if (!std::regex_search(d, m, std::regex("([0-9.]+)(us|ms|s)"))) return -1;
  const double v = std::stod(m[1]);
  return m[2] == "us" ? v / 1000 : m[2] == "ms" ? v : v * 1000;
}

class ElasticPsTest : public TrainingClusterTest {
 protected:
  // Three PS at most, the chief's spec naming two (ps:2 is the joiner's
  // address); returns the spec naming all three. The job is not written.
  std::string SetupTwoOfThreePs() {
    Setup(/*ps=*/3, /*workers=*/2, ConsistencyDef::ASYNC, /*steps=*/kSteps);
    const std::string full = cluster_.spec_path;
    std::ofstream(dir_ + "-spec2.json") << "{\"cluster\": {\"chief\": [\"" << cluster_.chief << "\"], \"ps\": [\""
                                        << cluster_.ps[0] << "\", \"" << cluster_.ps[1] << "\"], \"worker\": [\""
                                        << cluster_.workers[0] << "\", \"" << cluster_.workers[1] << "\"]}}";
    cluster_.spec_path = dir_ + "-spec2.json";
    job_.mutable_failure()->set_max_ps(3);
    job_.mutable_checkpoint()->set_every_steps(250);
    return full;
  }
  absl::StatusOr<std::unique_ptr<Daemon>> StartJoiningPs(const std::string& full) {
    return Daemon::Start("ps:2", {"/usr/bin/env", TfConfig(full, "ps", 2), RunfilePath("ps/server"),
                                  "--snapshot_dir=" + dir_});
  }
};

TEST_F(ElasticPsTest, AsyncPsJoinsAndLeavesEveryAcknowledgedPushCountedOnce) {
  const std::string full = SetupTwoOfThreePs();
  WriteJob();
  auto log = [this](int i) { return absl::StrCat("--data_log=", dir_, "-data-", i, ".log"); };
  auto ps0 = StartPs(0);
  auto ps1 = StartPs(1);
  auto w0 = StartWorker(0, {log(0)});
  auto w1 = StartWorker(1, {log(1)});
  auto chief = StartChief();
  ASSERT_TRUE(chief && w0 && w1 && ps0 && ps1);

  ASSERT_TRUE(WaitForStep(chief.get(), 150));
  auto ps2 = StartJoiningPs(full);
  ASSERT_TRUE(ps2.ok()) << ps2.status();
  const std::string joined = chief->WaitForMatch("^ps membership: ps:2 joins; .*training paused for", absl::Minutes(1));
  ASSERT_FALSE(joined.empty());

  ASSERT_TRUE(WaitForStep(chief.get(), 500));
  ASSERT_TRUE(ps1->Kill(SIGTERM));
  const std::string left = chief->WaitForMatch("^ps membership: ps:1 leaves; .*training paused for", absl::Minutes(1));
  ASSERT_FALSE(left.empty());
  EXPECT_EQ(ExitCode(ps1.get(), absl::Minutes(1)), 0);
  EXPECT_TRUE(ps1->WaitForLine("left the job: the chief moved every variable off", absl::ZeroDuration()));

  EXPECT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = Summary();
  EXPECT_GE(Field(summary, "steps"), kSteps) << summary;

  // The pauses: each move's, against the checkpoints' (their in-memory
  // copy of every variable, the moved ones among them), in the same run.
  std::vector<double> moves, checkpoints;
  for (const std::string& line : {joined, left}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex("training paused for ([0-9]+) ms")));
    moves.push_back(std::stod(m[1]));
  }
  std::set<int64_t> seen;  // the chief prints each line twice (its report and its log)
  for (size_t k = 0; k < chief->lines(); ++k) {
    std::string line =
        chief->WaitForMatch("checkpoint of step [0-9]+ committed \\(training paused [^,]+,", absl::ZeroDuration(), k);
    if (line.empty()) break;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex("step ([0-9]+) committed \\(training paused ([^,]+),")));
    if (seen.insert(std::stoll(m[1])).second) checkpoints.push_back(Millis(m[2]));
  }
  ASSERT_FALSE(checkpoints.empty());
  std::vector<double> sorted = checkpoints;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::cerr << "FIGURE: " << joined << std::endl << "FIGURE: " << left << std::endl;
  std::cerr << "FIGURE: PS move pauses (ms): join " << moves[0] << ", leave " << moves[1]
            << "; the checkpoints' pauses (in-memory copy of every variable) in the same run: "
            << absl::StrJoin(checkpoints, " ") << " ms, median " << median << "; join/checkpoint "
            << moves[0] / median << ", leave/checkpoint " << moves[1] / median << std::endl;

  // Acknowledged pushes, by the workers' logs: one line a step pushed.
  int64_t acknowledged = 0;
  for (int i = 0; i < 2; ++i) {
    std::ifstream f(absl::StrCat(dir_, "-data-", i, ".log"));
    int64_t generation, step, stream, batch, ms;
    std::set<int64_t> steps;
    while (f >> generation >> step >> stream >> batch >> ms) {
      EXPECT_TRUE(steps.insert(step).second) << "worker:" << i << " pushed step " << step << " twice";
      ++acknowledged;
    }
  }
  EXPECT_EQ(acknowledged, 2 * kSteps);

  // The final checkpoint: ps-0 and ps-2 (ps:1 left), each variable on one
  // store, its pushes counted once each.
  ManifestStore manifests(dir_ + "/ckpt");
  auto m = manifests.LatestValid();
  ASSERT_TRUE(m.ok()) << m.status();
  std::set<std::string> stores;
  std::map<std::string, int> held;
  std::map<std::string, int64_t> updates;
  for (const auto& shard : m->shard()) {
    stores.insert(shard.path());
    auto store = SnapshotStore::OpenReadOnly(dir_ + "/ckpt/" + shard.path());
    ASSERT_TRUE(store.ok()) << store.status();
    auto snap = (*store)->Read(m->step());
    ASSERT_TRUE(snap.ok()) << snap.status();
    for (const VariableState& v : snap->variables) {
      ++held[v.def.name()];
      updates[v.def.name()] = v.updates;
    }
  }
  EXPECT_EQ(stores, (std::set<std::string>{"ps-0", "ps-2"}));
  EXPECT_EQ(held.size(), static_cast<size_t>(m->variable_size())) << "every variable of the model";
  for (const auto& [name, n] : held) {
    EXPECT_EQ(n, 1) << name << " held by " << n << " stores";
    EXPECT_EQ(updates[name], acknowledged) << name << ": pushes applied vs acknowledged";
  }

  // That checkpoint restores: a new chief of the spec's two PS (new
  // processes; ps:2 gone) reads it, assembling each store's variables
  // since they are no longer where the first placement put them, and
  // trains on (a longer run: its schedule differs, so the PS are new).
  ps2->reset();
  ps0.reset();
  ps0 = StartPs(0);
  ps1 = StartPs(1);
  w0 = StartWorker(0);
  w1 = StartWorker(1);
  job_.set_steps(kSteps + 100);
  WriteJob();
  chief = StartChief();
  ASSERT_TRUE(chief && w0 && w1 && ps0 && ps1);
  EXPECT_TRUE(chief->WaitForLine("was taken with another layout", absl::Minutes(2)));
  EXPECT_EQ(ExitCode(chief.get()), 0);
  const std::string resumed = Summary();
  EXPECT_EQ(Field(resumed, "restored_from_step"), m->step()) << resumed;
  EXPECT_GE(Field(resumed, "steps"), kSteps + 100) << resumed;
}

// Failures around a PS join: a worker is stopped (SIGSTOP) as ps:2 starts,
// so the move's pause of the workers times out on it inside the move; once
// the move is done, that worker and ps:0 are killed and restarted, as a
// supervisor would, and the chief restores a checkpoint taken with the
// placement before the move onto the placement after it. The job finishes.
TEST_F(ElasticPsTest, AWorkerStoppedDuringAPsJoinThenKilledWithAPsIsSurvived) {
  const std::string full = SetupTwoOfThreePs();
  WriteJob();
  auto ps0 = StartPs(0);
  auto ps1 = StartPs(1);
  auto w0 = StartWorker(0);
  auto w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && w0 && w1 && ps0 && ps1);
  ASSERT_TRUE(WaitForStep(chief.get(), 150));  // before the checkpoint of step 250
  ASSERT_TRUE(w1->Kill(SIGSTOP));
  auto ps2 = StartJoiningPs(full);
  ASSERT_TRUE(ps2.ok()) << ps2.status();
  const std::string joined = chief->WaitForMatch("^ps membership: ps:2 joins; .*training paused for", absl::Minutes(2));
  ASSERT_FALSE(joined.empty());
  std::cerr << "FIGURE: with worker:1 stopped: " << joined << std::endl;
  ASSERT_TRUE(w1->Kill(SIGKILL));
  ASSERT_TRUE(ps0->Kill(SIGKILL));
  ASSERT_TRUE(w1->Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(ps0->Wait(absl::Seconds(30)).ok());
  ps0 = StartPs(0);
  w1 = StartWorker(1);
  ASSERT_TRUE(ps0 && w1);

  EXPECT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = Summary();
  EXPECT_GE(Field(summary, "steps"), kSteps) << summary;
  EXPECT_GE(Field(summary, "failures_survived"), 1) << summary;
  EXPECT_GT(Field(summary, "accuracy"), 0.8) << summary;
  EXPECT_EQ(ExitCode(w0.get(), absl::Minutes(1)), 0);
  EXPECT_EQ(ExitCode(w1.get(), absl::Minutes(1)), 0);
}

}  // namespace
}  // namespace testing
}  // namespace psrt
