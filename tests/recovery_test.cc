// Faults inside the chief's own protocol (issue #18), with real processes:
// a PS killed while a checkpoint waits for its snapshot to become durable,
// a snapshot disk that fills up, a PS hung (SIGSTOP) for longer than every
// default timeout, a worker that misses a restore and comes back with stale
// gradients, and a corrupt snapshot file restored from and then written
// again. Each test ends with the job finished at the accuracy of an
// unfailed run, and with every PS's applied pushes (its global step, ASYNC)
// equal to the sum of the worker steps in the final manifest: no update
// lost, none applied twice, none of an old generation applied.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "chief/cluster_clients.h"
#include "common/rpc/channel_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/harness/tmpfs.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::Tmpfs;

constexpr int64_t kSteps = 1500;  // per worker

class RecoveryTest : public testing::TrainingClusterTest {
 protected:
  void SetupJob() {
    Setup(2, 2, ConsistencyDef::ASYNC, kSteps);
    job_.mutable_eval()->set_max_examples(0);  // all 10k: the comparison needs the precision
    // Past the longest fault below (a 3 min SIGSTOP), so that a PS that
    // really died fails the test instead of hanging it.
    job_.mutable_failure()->set_ps_wait_ms(240000);
    WriteJob();
  }
  void StartAll(std::vector<std::string> ps1_flags = {}, std::vector<std::string> w1_flags = {}) {
    ps0_ = StartPs(0);
    ps1_ = Start("ps/server", "ps:1", ps1_flags);
    w0_ = StartWorker(0);
    w1_ = StartWorker(1, w1_flags);
    chief_ = StartChief();
  }
  std::string PsStoreDir(int ps) const { return absl::StrCat(dir_, "/ckpt/ps-", ps); }
  // Names and sizes of the files in `dir`, sorted.
  static std::vector<std::string> Listing(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return out;
    while (dirent* e = ::readdir(d)) {
      struct stat st;
      std::string path = dir + "/" + e->d_name;
      if (::stat(path.c_str(), &st) == 0) out.push_back(absl::StrCat(e->d_name, " ", st.st_size));
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }

  // The accuracy of the same job with no fault, run once per test binary.
  double Baseline() {
    static double baseline = NAN;
    if (std::isnan(baseline)) {
      const std::string real = job_.checkpoint().dir();
      job_.mutable_checkpoint()->set_dir(dir_ + "/baseline-ckpt");
      WriteJob();
      StartAll();
      EXPECT_EQ(ExitCode(chief_.get()), 0);
      baseline = Field(Summary(), "accuracy");
      std::cerr << "\nFIGURE: baseline accuracy (no fault): " << baseline << "\n";
      ps0_.reset();
      ps1_.reset();
      w0_.reset();
      w1_.reset();
      job_.mutable_checkpoint()->set_dir(real);
      WriteJob();
    }
    return baseline;
  }

  // The job finished, at the accuracy of an unfailed run, and every PS
  // applied exactly the pushes the final manifest's worker steps account for.
  void ExpectFinishedWithEveryPushOnce(double baseline) {
    ASSERT_EQ(ExitCode(chief_.get(), absl::Minutes(10)), 0);
    std::string s = Summary();
    EXPECT_EQ(Field(s, "steps"), kSteps) << s;
    EXPECT_NEAR(Field(s, "accuracy"), baseline, 0.025) << s;
    ManifestStore manifests(dir_ + "/ckpt");
    absl::StatusOr<CheckpointManifest> m = manifests.LatestValid();
    ASSERT_TRUE(m.ok()) << m.status();
    int64_t sum = 0;
    for (int64_t step : m->worker_step()) sum += step;
    EXPECT_EQ(sum, 2 * kSteps) << m->DebugString();
    ChannelCache channels;
    for (int p = 0; p < 2; ++p) {
      PsAdmin admin(channels.Get(cluster_.ps[p]), absl::StrCat("ps:", p));
      absl::StatusOr<PsStatusResponse> st = admin.Status();
      ASSERT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(st->global_step(), sum) << "ps:" << p << " applied pushes vs the manifest's worker steps";
    }
  }

  // Seconds from `since` until the chief logs `line` (-1 if it never does).
  double SecondsUntil(absl::Time since, const std::string& line) {
    if (!chief_->WaitForLine(line, absl::Minutes(5))) return -1;
    return absl::ToDoubleSeconds(absl::Now() - since);
  }
  // Prints "FIGURE: <what><seconds><unit>" once the chief logs `line`: the
  // figures the note reports.
  void Figure(const std::string& what, absl::Time since, const std::string& line, const std::string& unit) {
    const double seconds = SecondsUntil(since, line);
    std::cerr << "\nFIGURE: " << what << seconds << unit << "\n";
  }

  std::unique_ptr<Daemon> ps0_, ps1_, w0_, w1_, chief_;
};

TEST_F(RecoveryTest, PsKilledWhileACheckpointWaitsForDurability) {
  SetupJob();
  const double baseline = Baseline();
  // ps:1's third snapshot (after steps 0 and ~200) stalls before it is
  // durable; the chief waits for it while training goes on.
  StartAll({"--fault_pause_snapshot_after_chunks=1", "--fault_pause_snapshot_number=3"});
  ASSERT_TRUE(ps1_->WaitForLine("FAULT: snapshot writer stalled", absl::Minutes(3)));
  ps1_->Kill(SIGKILL);
  ASSERT_TRUE(ps1_->Wait(absl::Seconds(30)).ok());
  const absl::Time killed = absl::Now();
  ps1_ = StartPs(1);  // as a supervisor would
  ASSERT_TRUE(chief_->WaitForLine("WARNING: checkpoint abandoned", absl::Minutes(2)));
  Figure("PS killed during the durability wait -> training resumed: ", killed, "recovered to the checkpoint of step", " s");
  ExpectFinishedWithEveryPushOnce(baseline);
}

// A chief killed and restarted on a host whose clock is an hour behind (or
// ahead): generations came from the clock, so the new chief chose one
// below the workers' and restarted them thousands of times a minute,
// each refused ("worker already running generation ..."), training frozen.
// Generations now go on from the job state and the tasks' own.
class ChiefClockTest : public RecoveryTest {
 protected:
  // `offset` as libfaketime reads FAKETIME: "-1h", "+1h".
  void RestartTheChiefWithItsClockOff(const std::string& offset) {
    SetupJob();
    const double baseline = Baseline();
    StartAll();
    ASSERT_TRUE(WaitForStep(chief_.get(), 400));  // past the checkpoint of step 200
    chief_->Kill(SIGKILL);
    ASSERT_TRUE(chief_->Wait(absl::Seconds(30)).ok());
    std::vector<std::string> argv = {"/usr/bin/env",
                                     "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                     "FAKETIME=" + offset, "FAKETIME_DONT_FAKE_MONOTONIC=1",
                                     testing::RunfilePath("chief/main")};
    for (const std::string& f : Common("chief:0")) argv.push_back(f);
    argv.push_back("--job=" + job_path_);
    auto chief = Daemon::Start("chief:0", argv);
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = *std::move(chief);
    ASSERT_TRUE(chief_->WaitForLine("the previous chief of this job did not finish", absl::Minutes(1)));
    ExpectFinishedWithEveryPushOnce(baseline);
    EXPECT_FALSE(chief_->WaitForLine("already running generation", absl::ZeroDuration()));
  }
};

TEST_F(ChiefClockTest, AChiefRestartedWithItsClockAnHourBehindResumes) { RestartTheChiefWithItsClockOff("-1h"); }

TEST_F(ChiefClockTest, AChiefRestartedWithItsClockAnHourAheadResumes) { RestartTheChiefWithItsClockOff("+1h"); }

TEST_F(RecoveryTest, SnapshotDiskFullAbandonsCheckpointsUntilThereIsSpace) {
  SetupJob();
  const std::string store = PsStoreDir(1);
  std::unique_ptr<Tmpfs> tmpfs = Tmpfs::Mount(store, "64m");
  if (tmpfs == nullptr) GTEST_SKIP() << "cannot mount a tmpfs at " << store << ": this test needs root and mount rights";
  const double baseline = Baseline();
  StartAll();
  ASSERT_FALSE(chief_->WaitForMatch("checkpoint of step [1-9][0-9]* committed", absl::Minutes(3)).empty());
  // Fill the disk under ps:1's snapshot store.
  const std::string filler = store + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    std::string block(1 << 20, 'x');
    while (out.write(block.data(), block.size())) {
    }
  }
  const absl::Time full = absl::Now();
  ASSERT_TRUE(chief_->WaitForLine("WARNING: checkpoint abandoned", absl::Minutes(2)));
  std::cerr << "\nFIGURE: disk full -> first checkpoint abandoned: " << absl::ToDoubleSeconds(absl::Now() - full)
            << " s (training never stopped)\n";
  EXPECT_TRUE(ps1_->process()->Running()) << "ps:1 died of the full disk";
  ASSERT_EQ(std::remove(filler.c_str()), 0);
  const absl::Time freed = absl::Now();
  Figure("space back -> checkpoints work again: ", freed, "checkpoints work again", " s");
  ExpectFinishedWithEveryPushOnce(baseline);
  EXPECT_EQ(Field(Summary(), "failures_survived"), 0);  // nothing was lost: no restore
}

// A snapshot store too small for any snapshot: every checkpoint is
// abandoned, training goes on to the end, and the final checkpoint cannot
// be committed either. The chief used to try it again for ever after
// training ended; it now stops after failure.final_checkpoint_wait_ms with
// an error that names the last committed checkpoint and what to do, and
// the PS stay up with the trained parameters for the next chief.
TEST_F(RecoveryTest, ASnapshotStoreTooSmallForAnySnapshotEndsTheJobWithAClearError) {
  SetupJob();
  job_.set_steps(600);
  job_.mutable_failure()->set_final_checkpoint_wait_ms(3000);
  job_.mutable_failure()->set_retry_backoff_ms(200);
  job_.mutable_failure()->set_retry_backoff_max_ms(1000);
  WriteJob();
  const std::string store = PsStoreDir(1);
  std::unique_ptr<Tmpfs> tmpfs = Tmpfs::Mount(store, "256k");
  if (tmpfs == nullptr) GTEST_SKIP() << "cannot mount a tmpfs at " << store << ": this test needs root and mount rights";
  StartAll();
  ASSERT_TRUE(chief_->WaitForLine("WARNING: checkpoint abandoned", absl::Minutes(2)));
  ASSERT_TRUE(chief_->WaitForLine("final checkpoint failed, watching and trying again", absl::Minutes(3)));
  const absl::Time first = absl::Now();
  EXPECT_NE(ExitCode(chief_.get(), absl::Minutes(2)), 0);
  std::cerr << "\nFIGURE: first failed final checkpoint -> the chief stopped: "
            << absl::ToDoubleSeconds(absl::Now() - first) << " s\n";
  EXPECT_TRUE(chief_->WaitForLine("its final checkpoint could not be committed", absl::ZeroDuration()));
  EXPECT_TRUE(chief_->WaitForLine("The last committed checkpoint is none", absl::ZeroDuration()));
  EXPECT_TRUE(ps1_->process()->Running()) << "ps:1 keeps the trained parameters";
  EXPECT_TRUE(ps0_->process()->Running());
}

TEST_F(RecoveryTest, PsStoppedLongerThanEveryTimeoutResumesWithoutARestore) {
  SetupJob();
  const double baseline = Baseline();
  StartAll();
  ASSERT_FALSE(chief_->WaitForMatch("checkpoint of step [1-9][0-9]* committed", absl::Minutes(3)).empty());
  ps1_->Kill(SIGSTOP);
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(chief_->WaitForLine("waiting for ps:1", absl::Minutes(1)));
  // Longer than every default timeout of the chief and the workers.
  absl::SleepFor(absl::Minutes(3) + absl::Seconds(10));
  ps1_->Kill(SIGCONT);
  const absl::Time continued = absl::Now();
  ASSERT_TRUE(chief_->WaitForLine("answers again after", absl::Minutes(1)));
  std::cerr << "\nFIGURE: stopped " << absl::ToDoubleSeconds(continued - stopped)
            << " s; continued -> chief saw it back: " << absl::ToDoubleSeconds(absl::Now() - continued) << " s\n";
  ExpectFinishedWithEveryPushOnce(baseline);
  std::string s = Summary();
  EXPECT_EQ(Field(s, "failures_survived"), 0) << s;     // state intact: no rollback
  EXPECT_EQ(Field(s, "restored_from_step"), -1) << s;  // no step recomputed
}

TEST_F(RecoveryTest, AStaleWorkerCannotWriteIntoRestoredParameters) {
  SetupJob();
  const double baseline = Baseline();
  // worker:1 stops itself at step 300 with gradients computed from the
  // parameters of before the restore below, and cannot be reached (to be
  // paused or told of the restore) until it is continued.
  StartAll({}, {"--fault_stop_before_push_at_step=300"});
  ASSERT_TRUE(w1_->WaitForLine("FAULT: stopping before the push of step 300", absl::Minutes(3)));
  ps1_->Kill(SIGKILL);
  ASSERT_TRUE(ps1_->Wait(absl::Seconds(30)).ok());
  const absl::Time killed = absl::Now();
  ps1_ = StartPs(1);
  Figure("PS killed -> recovered (worker:1 unreachable): ", killed, "recovered to the checkpoint of step", " s");
  w1_->Kill(SIGCONT);  // it pushes its stale gradients to both PS
  ExpectFinishedWithEveryPushOnce(baseline);
  ChannelCache channels;
  PsAdmin ps0(channels.Get(cluster_.ps[0]), "ps:0");
  absl::StatusOr<PsStatusResponse> st = ps0.Status();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_GE(st->stale_generation_refused(), 1) << "the stale push never reached ps:0";
}

TEST_F(RecoveryTest, CorruptSnapshotFileIsSetAsideAndSnapshotsGoOn) {
  SetupJob();
  const double baseline = Baseline();
  StartAll();
  // Checkpoints at 0, ~200 and ~400: ps:1's store then holds one data file
  // per kept snapshot (SNAPSHOT_FORMAT.md).
  ASSERT_FALSE(chief_->WaitForMatch("checkpoint of step ([4-9][0-9]{2}|1[0-9]{3}) committed", absl::Minutes(3)).empty());
  ps1_->Kill(SIGKILL);
  ASSERT_TRUE(ps1_->Wait(absl::Seconds(30)).ok());
  const absl::Time killed = absl::Now();
  // Damage the middle of the data file of the newest committed checkpoint
  // (snapshot-<step:020>-<nonce>.data; a newer one may be a write cut
  // short by the kill, which no restore reads).
  absl::StatusOr<CheckpointManifest> committed = ManifestStore(dir_ + "/ckpt").LatestValid();
  ASSERT_TRUE(committed.ok()) << committed.status();
  const std::string prefix = absl::StrFormat("snapshot-%020d-", committed->step());
  std::string newest;
  DIR* d = ::opendir(PsStoreDir(1).c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (absl::StartsWith(name, prefix) && absl::EndsWith(name, ".data")) newest = PsStoreDir(1) + "/" + name;
  }
  ::closedir(d);
  ASSERT_FALSE(newest.empty()) << "no data file of step " << committed->step() << " in " << PsStoreDir(1);
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const int64_t size = f.tellg();
    ASSERT_GT(size, 16 << 10) << newest;
    f.seekp(size / 2);
    std::string junk(4096, '\x5a');
    f.write(junk.data(), junk.size());
  }
  // The inspector finds the damage, and changes no file while it looks.
  {
    std::vector<std::string> before = Listing(PsStoreDir(1));
    auto inspect = Daemon::Start("checkpoints", {testing::RunfilePath("chief/checkpoints"), dir_ + "/ckpt", "--verify"});
    ASSERT_TRUE(inspect.ok()) << inspect.status();
    EXPECT_FALSE((*inspect)->WaitForMatch("DAMAGED: ps:1: .*(Corruption|checksum)", absl::Minutes(1)).empty());
    EXPECT_EQ(ExitCode(inspect->get()), 1);
    EXPECT_EQ(Listing(PsStoreDir(1)), before);
  }
  ps1_ = StartPs(1);
  ASSERT_TRUE(ps1_->WaitForLine("was corrupt: moved to", absl::Minutes(2)));
  ASSERT_FALSE(chief_->WaitForMatch("refused checkpoint of step [0-9]+: .*ps", absl::Minutes(2)).empty());
  Figure("PS killed, snapshot corrupt -> recovered from an older checkpoint: ", killed, "recovered to the checkpoint of step", " s");
  // ...and ps:1 snapshots again, into its fresh store.
  const size_t recovered = chief_->lines();
  ASSERT_FALSE(chief_->WaitForMatch("checkpoint of step [0-9]+ committed", absl::Minutes(2), recovered).empty());
  ExpectFinishedWithEveryPushOnce(baseline);
}

}  // namespace
}  // namespace psrt
