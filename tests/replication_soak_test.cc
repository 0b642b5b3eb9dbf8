// Soak of replicated PS shards (job.replication.factor 2, issue #15) with
// real processes: a chief, three PS and two workers training the MLP on
// Fashion-MNIST. The test kills a PS with SIGKILL every few seconds, each
// in turn, and restarts it as a supervisor would; each kill is failed
// over (the backups promoted) and each restarted PS rebuilt (it becomes a
// replica again while training goes on), so the next kill of the other PS
// again finds every store with a live copy.
//
// Checked: training ends with the accuracy of an unfailed run (the
// published 0.8833 of the MLP, on the whole test set), the chief reports
// every failover and rebuild and zero rolled-back steps with no restore, and no acknowledged
// update is missing: each store's copies (primary and backup) applied
// exactly one push per worker step (the PS's per-store update counter),
// so nothing acknowledged was lost and nothing applied twice.
//
// After a checkpoint restore (both PS killed at once: no copy of a store
// is left, so the chief goes back to the checkpoint) the backups are
// restored too: a later kill of one PS is again a failover, not another
// restore, and every store's two copies applied the same pushes.
//
// SYNC: each PS killed once and rebuilt; the two copies of each store end
// equal, with no rollback (a rebuild waits for the workers to pause at the
// same step, so no step is partly summed on the copy it reads).
//
// A rebuild that cannot copy (here the PS do not share the snapshot volume
// the copy goes through) puts the old roles back: training goes on from
// the serving copies with no rollback and no push lost, and the chief
// says so and tries again later.
//
// Figures (stderr, FIGURE:): SIGKILL -> failover done, and the training
// pause of each rebuild.
#include <signal.h>

#include <algorithm>
#include <iostream>
#include <regex>
#include <vector>

#include "absl/strings/str_join.h"
#include "chief/cluster_clients.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;

constexpr int64_t kSteps = 7000;  // per worker
constexpr int kPs = 3;  // so a rebuild also moves a store it does not copy
constexpr int kKills = 6;

class ReplicationSoak : public testing::TrainingClusterTest {
 protected:
  // The job with factor 2 into checkpoint dir `ckpt` (each run its own).
  void Prepare(const std::string& ckpt) {
    job_.mutable_replication()->set_factor(2);
    job_.mutable_replication()->set_failover_after_ms(200);
    job_.mutable_checkpoint()->set_dir(dir_ + "/" + ckpt);
    job_.mutable_checkpoint()->set_every_steps(0);  // only the first and the last: a restore would roll back
    job_.mutable_failure()->set_ps_wait_ms(60000);   // a failover that never comes fails the test, not hangs it
    job_.set_summary_path(dir_ + "/" + ckpt + "-summary.json");
    WriteJob();
  }
  std::string SummaryOf(const std::string& ckpt) {
    std::ifstream in(dir_ + "/" + ckpt + "-summary.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The number `pattern`'s group finds in the first line matching it from
  // line `from` of `d`, within `timeout`; -1 when none came.
  static double WaitForNumber(Daemon* d, const std::string& pattern, absl::Duration timeout, size_t from) {
    const std::string line = d->WaitForMatch(pattern, timeout, from);
    std::smatch m;
    if (line.empty() || !std::regex_search(line, m, std::regex(pattern))) return -1;
    return std::stod(m[1]);
  }
  // Store `store`'s update counter (one per push applied) on each of its
  // copies in the placed layout, ps:store and ps:store+1 (mod #PS), at the current
  // placement epoch; empty (and the test told) when one does not answer.
  std::vector<int64_t> CopyCounts(int store) {
    ChannelCache channels;
    auto st = PsAdmin(channels.Get(cluster_.ps[0]), "ps:0").Status();
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return {};
    std::vector<int64_t> counts;
    const int n = static_cast<int>(cluster_.ps.size());
    for (int on : {store, (store + 1) % n}) {
      PsAdmin a(channels.Get(cluster_.ps[on]), absl::StrCat("ps:", on));
      a.SetReplica(store, st->epoch());
      auto c = a.Status();
      EXPECT_TRUE(c.ok()) << c.status();
      if (!c.ok()) return {};
      counts.push_back(c->global_step());
    }
    return counts;
  }
};

std::string Stats(std::vector<double> v) {
  if (v.empty()) return "none";
  std::sort(v.begin(), v.end());
  return absl::StrCat("min ", v.front(), " median ", v[v.size() / 2], " max ", v.back(), " (n=", v.size(), ")");
}

TEST_F(ReplicationSoak, PsKilledEveryFewSecondsLosesNothingAndEndsAsAccurate) {
  Setup(kPs, 2, ConsistencyDef::ASYNC, kSteps);
  Prepare("soak");
  job_.mutable_eval()->set_max_examples(10000);  // the whole test set
  WriteJob();
  std::unique_ptr<Daemon> ps[kPs] = {StartPs(0), StartPs(1), StartPs(2)};
  auto w0 = StartWorker(0), w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && ps[0] && ps[1] && ps[2] && w0 && w1);
  ASSERT_TRUE(chief->WaitForLine("step ", absl::Minutes(2)));
  std::vector<double> failover_s, pause_ms;
  for (int k = 0; k < kKills; ++k) {
    const int victim = k % kPs;
    // Spread over the run: kill k once the chief reports step 900 (k+1).
    size_t from = chief->lines();
    while (true) {
      const double step = WaitForNumber(chief.get(), "step ([0-9]+)/", absl::Minutes(1), from);
      ASSERT_GE(step, 0) << "no progress before kill " << k;
      ASSERT_LT(step, kSteps) << "the job ended before kill " << k;
      from = chief->lines();
      if (step >= 900 * (k + 1)) break;
    }
    const absl::Time killed = absl::Now();
    ASSERT_TRUE(ps[victim]->Kill(SIGKILL));
    ASSERT_TRUE(chief->WaitForLine(absl::StrCat("failover: ps:", victim, " is gone"), absl::Minutes(1), from))
        << "kill " << k;
    failover_s.push_back(absl::ToDoubleSeconds(absl::Now() - killed));
    // Restarted, as a supervisor would: a new incarnation on the same address.
    (void)ps[victim]->Wait(absl::Seconds(10));
    ps[victim] = StartPs(victim);
    ASSERT_TRUE(ps[victim]);
    const double paused =
        WaitForNumber(chief.get(), absl::StrCat("rebuilt: ps:", victim, " .*training paused ([0-9.]+) ms"),
                      absl::Minutes(1), from);
    ASSERT_GE(paused, 0) << "ps:" << victim << " was not rebuilt after kill " << k;
    pause_ms.push_back(paused);
    ASSERT_TRUE(chief->WaitForLine("every store is replicated again", absl::ZeroDuration(), from)) << "kill " << k;
  }
  ASSERT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = SummaryOf("soak");
  std::cerr << "FIGURE: soak summary " << summary << "FIGURE: " << kKills << " PS SIGKILLs, SIGKILL -> failover done: "
            << Stats(failover_s) << " s; rebuild pause: " << Stats(pause_ms) << " ms (failover_after_ms 200)\n";
  EXPECT_EQ(Field(summary, "failovers"), kKills) << summary;
  EXPECT_EQ(Field(summary, "rebuilds"), kKills) << summary;
  EXPECT_EQ(Field(summary, "rolled_back_steps"), 0) << summary;
  EXPECT_EQ(Field(summary, "restored_from_step"), -1) << summary;
  EXPECT_EQ(Field(summary, "steps"), kSteps) << summary;
  EXPECT_FALSE(chief->WaitForLine("recovering:", absl::ZeroDuration())) << "a restore ran";
  // The published MLP figure, reached by this job unfailed.
  EXPECT_GE(Field(summary, "accuracy"), 0.8833) << summary;

  // No acknowledged update missing, none applied twice: after the last
  // rebuild store s is on ps:s (primary) and ps:s+1 (backup), and both
  // copies applied one push per worker step.
  for (int s = 0; s < kPs; ++s) {
    EXPECT_EQ(CopyCounts(s), std::vector<int64_t>(2, 2 * kSteps)) << "store " << s;
  }
}

TEST_F(ReplicationSoak, BackupsAreRestoredWithTheCheckpointSoTheNextKillIsAFailover) {
  Setup(2, 2, ConsistencyDef::ASYNC, 3000);
  Prepare("restore");
  job_.mutable_checkpoint()->set_every_steps(300);
  WriteJob();
  std::unique_ptr<Daemon> ps[2] = {StartPs(0), StartPs(1)};
  auto w0 = StartWorker(0), w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && ps[0] && ps[1] && w0 && w1);
  ASSERT_TRUE(chief->WaitForLine("checkpoint of step 3", absl::Minutes(2)));  // one of step >= 300
  size_t from = chief->lines();
  for (int p = 0; p < 2; ++p) ASSERT_TRUE(ps[p]->Kill(SIGKILL));
  for (int p = 0; p < 2; ++p) {
    (void)ps[p]->Wait(absl::Seconds(10));
    ps[p] = StartPs(p);
    ASSERT_TRUE(ps[p]);
  }
  ASSERT_TRUE(chief->WaitForLine("backups restored from the checkpoint of step", absl::Minutes(1), from));
  ASSERT_FALSE(chief->WaitForMatch("step [0-9]+/", absl::Minutes(1), chief->lines()).empty());
  from = chief->lines();
  ASSERT_TRUE(ps[1]->Kill(SIGKILL));
  ASSERT_TRUE(chief->WaitForLine("failover: ps:1 is gone", absl::Minutes(1), from));
  (void)ps[1]->Wait(absl::Seconds(10));
  ps[1] = StartPs(1);
  ASSERT_TRUE(ps[1]);
  ASSERT_TRUE(chief->WaitForLine("rebuilt: ps:1", absl::Minutes(1), from));
  ASSERT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = SummaryOf("restore");
  std::cerr << "FIGURE: restore summary " << summary << std::endl;
  EXPECT_FALSE(chief->WaitForLine("failover impossible", absl::ZeroDuration(), from)) << "no copy after the restore";
  EXPECT_FALSE(chief->WaitForLine("recovering:", absl::ZeroDuration(), from)) << "a second restore ran";
  EXPECT_EQ(Field(summary, "failovers"), 1) << summary;
  EXPECT_EQ(Field(summary, "rebuilds"), 1) << summary;
  EXPECT_GE(Field(summary, "restored_from_step"), 300) << summary;
  EXPECT_EQ(Field(summary, "steps"), 3000) << summary;
  // Both copies of each store applied the same pushes (the restored
  // counters, then every push since).
  for (int s = 0; s < 2; ++s) {
    const std::vector<int64_t> counts = CopyCounts(s);
    ASSERT_EQ(counts.size(), 2u);
    EXPECT_EQ(counts[0], counts[1]) << "store " << s << ": primary and backup applied different pushes";
    EXPECT_GE(counts[0], 2 * 3000) << "store " << s;
  }
}

TEST_F(ReplicationSoak, ARebuildThatCannotCopyPutsTheOldRolesBackAndLosesNothing) {
  constexpr int64_t kShort = 2000;
  Setup(2, 2, ConsistencyDef::ASYNC, kShort);
  Prepare("unshared");
  // Each PS its own snapshot directory: checkpoints work (each PS reads its
  // own), the rebuild's copy from one PS to the other cannot.
  auto own_dir = [this](int p) { return std::vector<std::string>{absl::StrCat("--snapshot_dir=", dir_, "/own", p)}; };
  std::unique_ptr<Daemon> ps[2] = {Start("ps/server", "ps:0", own_dir(0)), Start("ps/server", "ps:1", own_dir(1))};
  auto w0 = StartWorker(0), w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && ps[0] && ps[1] && w0 && w1);
  ASSERT_FALSE(chief->WaitForMatch("step ([3-9][0-9][0-9]|1[0-9][0-9][0-9])/", absl::Minutes(2)).empty());
  ASSERT_TRUE(ps[0]->Kill(SIGKILL));
  ASSERT_TRUE(chief->WaitForLine("failover: ps:0 is gone", absl::Minutes(1)));
  (void)ps[0]->Wait(absl::Seconds(10));
  ps[0] = Start("ps/server", "ps:0", own_dir(0));
  ASSERT_TRUE(ps[0]);
  ASSERT_TRUE(chief->WaitForLine("WARNING: rebuilding ps:0 failed", absl::Minutes(1)));
  ASSERT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = SummaryOf("unshared");
  EXPECT_EQ(Field(summary, "failovers"), 1) << summary;
  EXPECT_EQ(Field(summary, "rebuilds"), 0) << summary;
  EXPECT_EQ(Field(summary, "rolled_back_steps"), 0) << summary;
  EXPECT_EQ(Field(summary, "steps"), kShort) << summary;
  EXPECT_FALSE(chief->WaitForLine("recovering:", absl::ZeroDuration())) << "a restore ran";
  // Both stores served by ps:1 to the end, every push applied once.
  ChannelCache channels;
  auto st = PsAdmin(channels.Get(cluster_.ps[1]), "ps:1").Status();
  ASSERT_TRUE(st.ok()) << st.status();
  for (int s = 0; s < 2; ++s) {
    PsAdmin a(channels.Get(cluster_.ps[1]), "ps:1");
    a.SetReplica(s, st->epoch());
    auto c = a.Status();
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->global_step(), 2 * kShort) << "store " << s << " on ps:1";
  }
}

TEST_F(ReplicationSoak, SyncKillsAreFailedOverAndRebuiltWithEqualCopies) {
  constexpr int64_t kShort = 2000;
  Setup(2, 2, ConsistencyDef::SYNC, kShort);
  Prepare("sync");
  std::unique_ptr<Daemon> ps[2] = {StartPs(0), StartPs(1)};
  auto w0 = StartWorker(0), w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && ps[0] && ps[1] && w0 && w1);
  ASSERT_FALSE(chief->WaitForMatch("step ([3-9][0-9][0-9]|1[0-9][0-9][0-9])/", absl::Minutes(2)).empty());
  for (int victim = 0; victim < 2; ++victim) {
    const size_t from = chief->lines();
    ASSERT_TRUE(ps[victim]->Kill(SIGKILL));
    ASSERT_TRUE(chief->WaitForLine(absl::StrCat("failover: ps:", victim, " is gone"), absl::Minutes(1), from));
    (void)ps[victim]->Wait(absl::Seconds(10));
    ps[victim] = StartPs(victim);
    ASSERT_TRUE(ps[victim]);
    ASSERT_TRUE(chief->WaitForLine(absl::StrCat("rebuilt: ps:", victim), absl::Minutes(1), from));
  }
  ASSERT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = SummaryOf("sync");
  std::cerr << "FIGURE: sync summary " << summary << std::endl;
  EXPECT_EQ(Field(summary, "failovers"), 2) << summary;
  EXPECT_EQ(Field(summary, "rebuilds"), 2) << summary;
  EXPECT_EQ(Field(summary, "rolled_back_steps"), 0) << summary;
  EXPECT_EQ(Field(summary, "steps"), kShort) << summary;
  EXPECT_FALSE(chief->WaitForLine("recovering:", absl::ZeroDuration())) << "a restore ran";
  for (int s = 0; s < 2; ++s) {
    const std::vector<int64_t> counts = CopyCounts(s);
    ASSERT_EQ(counts.size(), 2u);
    EXPECT_EQ(counts[0], counts[1]) << "store " << s << ": primary and backup applied different updates";
    EXPECT_GE(counts[0], kShort) << "store " << s;
  }
}

}  // namespace
}  // namespace psrt
