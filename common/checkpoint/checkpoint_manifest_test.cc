#include "common/checkpoint/checkpoint_manifest.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

CheckpointManifest Manifest(int64_t step) {
  CheckpointManifest m;
  m.set_step(step);
  auto* s = m.add_shard();
  s->set_ps_task(0);
  s->set_path("ps-0");
  s->set_bytes(1234);
  return m;
}

class ManifestTest : public ::testing::Test {
 protected:
  std::string dir_ = ::testing::TempDir() + "/ckpt_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/nested";
};

TEST_F(ManifestTest, CommitReadListAndPrune) {
  ManifestStore store(dir_);
  EXPECT_EQ(store.LatestValid().status().code(), absl::StatusCode::kNotFound);
  for (int64_t step : {100, 200, 300}) ASSERT_TRUE(store.Commit(Manifest(step)).ok());
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{100, 200, 300}));
  auto m = store.Read(200);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shard(0).bytes(), 1234);
  EXPECT_EQ(store.LatestValid()->step(), 300);
  EXPECT_EQ(store.Prune(2), (std::vector<int64_t>{100}));
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{200, 300}));
  EXPECT_EQ(store.Read(100).status().code(), absl::StatusCode::kNotFound);
}

// Incremental checkpoints: two PS, each shard full or a delta on the step
// before. Retention keeps the newest `keep`, the full checkpoint B their
// chains go back to, and the newest full one before B: with one file
// corrupt, B or that one still restores.
TEST_F(ManifestTest, IncrementalRetentionKeepsAnIndependentFullCheckpoint) {
  ManifestStore store(dir_);
  auto commit = [&](int64_t step, bool delta0, bool delta1) {
    CheckpointManifest m;
    m.set_step(step);
    for (int p = 0; p < 2; ++p) {
      auto* s = m.add_shard();
      s->set_ps_task(p);
      s->set_path(absl::StrCat("ps-", p));
      s->set_delta(p == 0 ? delta0 : delta1);
      if (s->delta()) s->set_base_step(step - 100);
    }
    ASSERT_TRUE(store.Commit(m).ok());
  };
  commit(100, false, false);  // full
  commit(200, true, true);
  commit(300, false, false);  // full
  commit(400, true, true);
  commit(500, true, false);   // ps-1 wrote a full one (after a restart): not all full
  commit(600, true, true);
  EXPECT_EQ(store.Retained(2), (std::vector<int64_t>{100, 300, 500, 600}));
  EXPECT_EQ(store.Prune(2), (std::vector<int64_t>{200, 400}));
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{100, 300, 500, 600}));
  // A full checkpoint among the kept is the base; the one before it stays.
  commit(700, false, false);
  EXPECT_EQ(store.Retained(2), (std::vector<int64_t>{300, 600, 700}));
  // Only full checkpoints kept: each is independent of the others.
  commit(800, false, false);
  EXPECT_EQ(store.Retained(2), (std::vector<int64_t>{700, 800}));
  EXPECT_EQ(store.Retained(1), (std::vector<int64_t>{800}));
  // No full checkpoint before the base: nothing more to keep.
  ManifestStore fresh(dir_ + "-fresh");
  ASSERT_TRUE(fresh.Commit(Manifest(10)).ok());
  CheckpointManifest d = Manifest(20);
  d.mutable_shard(0)->set_delta(true);
  ASSERT_TRUE(fresh.Commit(d).ok());
  EXPECT_EQ(fresh.Retained(1), (std::vector<int64_t>{10, 20}));
}

TEST_F(ManifestTest, CorruptOrTruncatedManifestIsRefusedAndTheOlderOneUsed) {
  ManifestStore store(dir_);
  ASSERT_TRUE(store.Commit(Manifest(10)).ok());
  ASSERT_TRUE(store.Commit(Manifest(20)).ok());
  {
    std::fstream f(store.PathFor(20), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('\x7f');
  }
  auto bad = store.Read(20);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("checkpoint-20.manifest: manifest checksum mismatch"));
  std::vector<std::string> skipped;
  auto latest = store.LatestValid(&skipped);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->step(), 10);
  ASSERT_EQ(skipped.size(), 1u);

  std::ofstream(store.PathFor(30), std::ios::binary) << "ab";
  EXPECT_THAT(std::string(store.Read(30).status().message()), HasSubstr("truncated"));
  EXPECT_EQ(store.LatestValid()->step(), 10);
}

TEST_F(ManifestTest, ALeftoverTemporaryFileIsNeverACheckpoint) {
  ManifestStore store(dir_);
  ASSERT_TRUE(store.Commit(Manifest(5)).ok());
  // A crash between write and rename leaves only the .tmp file.
  std::ofstream(store.PathFor(6) + ".tmp", std::ios::binary) << "partial";
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{5}));
  EXPECT_EQ(store.LatestValid()->step(), 5);
}

TEST_F(ManifestTest, JobStateSurvivesAndCorruptionIsNamed) {
  ManifestStore store(dir_);
  auto empty = store.ReadJobState();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->failures_survived(), 0);
  EXPECT_FALSE(empty->running());
  ChiefJobState state;
  state.set_failures_survived(3);
  state.set_running(true);
  ASSERT_TRUE(store.WriteJobState(state).ok());
  auto back = ManifestStore(dir_).ReadJobState();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->failures_survived(), 3);
  EXPECT_TRUE(back->running());
  {
    std::fstream f(dir_ + "/job_state", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1);
    f.put('\x7f');
  }
  auto bad = store.ReadJobState();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("job_state: job state checksum mismatch"));
}

}  // namespace
}  // namespace psrt
