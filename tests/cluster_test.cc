// Whole clusters of real processes on loopback: a chief, parameter servers
// and workers training the Fashion-MNIST MLP, with processes killed by
// SIGKILL mid-run.
#include <filesystem>
#include <signal.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/plan/job_planner.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "common/testing/python_tool.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;

class ClusterTest : public testing::TrainingClusterTest {};

TEST_F(ClusterTest, TrainsAcrossProcessesAndTheLossFalls) {
  Setup(1, 1, ConsistencyDef::ASYNC, 400);
  job_.set_log_dir(dir_ + "/logs");
  WriteJob();
  auto ps = StartPs(0);
  auto worker = StartWorker(0);
  auto chief = StartChief();
  ASSERT_EQ(ExitCode(chief.get()), 0);
  // TensorBoard's own reader loads the chief's event file.
  std::string scalars = dir_ + "/scalars.txt";
  ASSERT_TRUE(testing::RunPythonTool("tests/tools/read_events.py", {dir_ + "/logs"}, scalars).ok());
  std::ifstream in(scalars);
  std::string events((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(events.find("eval/accuracy 400 "), std::string::npos) << events;
  EXPECT_NE(events.find("loss "), std::string::npos) << events;
  EXPECT_NE(events.find("examples_per_sec "), std::string::npos) << events;
  std::string s = Summary();
  EXPECT_GT(Field(s, "accuracy"), 0.75) << s;   // from 0.1 at chance
  EXPECT_LT(Field(s, "loss"), 0.8) << s;        // from ln(10) = 2.3
  EXPECT_EQ(Field(s, "steps"), 400) << s;
  EXPECT_EQ(Field(s, "failures_survived"), 0) << s;
  // The throughput is the run's mean, not the last heartbeat window's.
  double mean = 400.0 * job_.input().batch_size() / Field(s, "wall_seconds");
  EXPECT_NEAR(Field(s, "examples_per_sec"), mean, 0.01 * mean) << s;
  EXPECT_GT(Field(s, "examples_per_sec_last_window"), 0) << s;
  EXPECT_EQ(ExitCode(worker.get()), 0);  // the chief shut it down
}

TEST_F(ClusterTest, SparseModelTrainsWithRowsOnTwoPs) {
  Setup(2, 1, ConsistencyDef::ASYNC, 600);
  ASSERT_TRUE(testing::RunPythonTool("examples/make_sparse_data.py", {dir_ + "/data"}).ok());
  auto job = LoadJob(testing::RunfilePath("examples/sparse_libsvm.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  TrainingJob sparse = *job;
  sparse.mutable_input()->mutable_train()->set_files(0, dir_ + "/data/train.svm");
  sparse.mutable_input()->mutable_test()->set_files(0, dir_ + "/data/test.svm");
  sparse.set_steps(600);
  sparse.set_epochs(0);
  *sparse.mutable_checkpoint() = job_.checkpoint();
  sparse.set_summary_path(job_.summary_path());
  sparse.clear_eval();
  job_ = sparse;
  WriteJob();
  auto ps0 = StartPs(0), ps1 = StartPs(1);
  auto worker = StartWorker(0);
  auto chief = StartChief();
  ASSERT_EQ(ExitCode(chief.get()), 0);
  EXPECT_GT(Field(Summary(), "accuracy"), 0.8) << Summary();  // labels carry 5% noise
}

// strategy { hybrid }: dense layers all-reduced between the two workers'
// replicas, the embedding table on two PS; ps:1 SIGKILLed mid-run and
// restarted: every store (PS shards and replica shares) back to the last
// checkpoint, the group re-formed, the job finished.
TEST_F(ClusterTest, HybridTrainsTheSparseModelAndSurvivesAPsKill) {
  Setup(2, 2, ConsistencyDef::SYNC, 1200);
  ASSERT_TRUE(testing::RunPythonTool("examples/make_sparse_data.py", {dir_ + "/data"}).ok());
  auto job = LoadJob(testing::RunfilePath("examples/sparse_libsvm.pbtxt"));
  ASSERT_TRUE(job.ok()) << job.status();
  TrainingJob hybrid = *job;
  hybrid.mutable_strategy()->mutable_hybrid()->set_collective_timeout_ms(3000);
  hybrid.mutable_input()->mutable_train()->set_files(0, dir_ + "/data/train.svm");
  hybrid.mutable_input()->mutable_test()->set_files(0, dir_ + "/data/test.svm");
  hybrid.set_steps(1200);
  hybrid.set_epochs(0);
  *hybrid.mutable_checkpoint() = job_.checkpoint();
  hybrid.set_summary_path(job_.summary_path());
  hybrid.clear_eval();
  job_ = hybrid;
  WriteJob();
  auto ps0 = StartPs(0), ps1 = StartPs(1);
  auto w0 = StartWorker(0, {"--snapshot_dir=" + dir_}), w1 = StartWorker(1, {"--snapshot_dir=" + dir_});
  auto chief = StartChief();
  ASSERT_FALSE(chief->WaitForMatch("checkpoint of step ([3-9][0-9]{2}|1[01][0-9]{2}) committed", absl::Minutes(3)).empty());
  ps1->Kill(SIGKILL);
  ASSERT_TRUE(ps1->Wait(absl::Seconds(30)).ok());
  ps1 = StartPs(1);
  ASSERT_TRUE(chief->WaitForLine("recovered to the checkpoint of step", absl::Minutes(2)));
  ASSERT_EQ(ExitCode(chief.get()), 0);
  std::string s = Summary();
  std::cerr << "FIGURE: hybrid " << s << std::endl;
  EXPECT_GE(Field(s, "failures_survived"), 1) << s;
  EXPECT_EQ(Field(s, "steps"), 1200) << s;
  EXPECT_GT(Field(s, "accuracy"), 0.8) << s;  // labels carry 5% noise
  // Each worker's replica wrote its share of the dense layers.
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/worker-0")) << "no replica share";
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/worker-1")) << "no replica share";
}

TEST_F(ClusterTest, PsKilledAndRestartedResumesFromTheLastCheckpoint) {
  Setup(2, 1, ConsistencyDef::ASYNC, 1500);
  job_.mutable_eval()->set_max_examples(0);  // all 10k: the comparison needs the precision
  WriteJob();
  double baseline;
  {
    auto ps0 = StartPs(0), ps1 = StartPs(1);
    auto worker = StartWorker(0);
    auto chief = StartChief();
    ASSERT_EQ(ExitCode(chief.get()), 0);
    baseline = Field(Summary(), "accuracy");
  }
  job_.mutable_checkpoint()->set_dir(dir_ + "/ckpt2");
  WriteJob();
  auto ps0 = StartPs(0), ps1 = StartPs(1);
  auto worker = StartWorker(0);
  auto chief = StartChief();
  // A committed checkpoint past step 300, whatever step the polls hit.
  ASSERT_FALSE(chief->WaitForMatch("checkpoint of step ([3-9][0-9]{2}|1[0-9]{3}) committed", absl::Minutes(3)).empty());
  ps1->Kill(SIGKILL);
  ASSERT_TRUE(ps1->Wait(absl::Seconds(30)).ok());
  absl::Time killed = absl::Now();
  ps1 = StartPs(1);  // as a supervisor would
  ASSERT_TRUE(chief->WaitForLine("recovered to the checkpoint of step", absl::Minutes(2)));
  std::cerr << "PS kill to recovered: " << absl::FormatDuration(absl::Now() - killed) << "\n";
  ASSERT_EQ(ExitCode(chief.get()), 0);
  std::string s = Summary();
  EXPECT_EQ(Field(s, "failures_survived"), 1) << s;
  // ASYNC runs differ by their interleaving (and the overlapped pull's one
  // step of staleness): 0.0118 apart was seen on a loaded machine. Lost
  // updates are checked exactly by soak_test; this guards against a
  // recovery that trains from a wrong or empty state.
  EXPECT_NEAR(Field(s, "accuracy"), baseline, 0.025) << s;
}

TEST_F(ClusterTest, WorkerKilledInAsyncTheRestFinish) {
  Setup(1, 2, ConsistencyDef::ASYNC, 400);
  auto ps = StartPs(0);
  auto w0 = StartWorker(0);
  auto w1 = StartWorker(1, {"--kill_at_step=100"});
  auto chief = StartChief();
  ASSERT_TRUE(chief->WaitForLine("ASYNC training goes on without it", absl::Minutes(2)));
  ASSERT_EQ(ExitCode(chief.get()), 0);
  EXPECT_GT(Field(Summary(), "accuracy"), 0.7);
}

TEST_F(ClusterTest, WorkerKilledInSyncRejoinsAndTheJobCompletes) {
  Setup(1, 2, ConsistencyDef::SYNC, 300);
  auto ps = StartPs(0);
  auto w0 = StartWorker(0);
  auto w1 = StartWorker(1, {"--kill_at_step=100"});
  auto chief = StartChief();
  ASSERT_TRUE(w1->Wait(absl::Minutes(2)).ok());  // it killed itself at step 100
  w1 = StartWorker(1);
  ASSERT_TRUE(chief->WaitForLine("worker:1 (re)started", absl::Minutes(2)));
  ASSERT_EQ(ExitCode(chief.get()), 0);
  std::string s = Summary();
  EXPECT_EQ(Field(s, "steps"), 300) << s;
  EXPECT_GT(Field(s, "accuracy"), 0.7) << s;
}

TEST_F(ClusterTest, ChiefKilledAndRestartedResumesFromTheCommittedStep) {
  Setup(1, 1, ConsistencyDef::ASYNC, 800);
  auto ps = StartPs(0);
  auto worker = StartWorker(0);
  // Commits step 0 and about 200, then dies after every PS made the third
  // snapshot durable but before its manifest: that one must never be used.
  auto chief = StartChief({"--fault_kill_before_commit=3"});
  std::string killed = chief->WaitForMatch("killing the chief before committing step [0-9]+", absl::Minutes(3));
  ASSERT_FALSE(killed.empty());
  const double uncommitted = std::stod(killed.substr(killed.rfind(' ') + 1));
  chief->Wait(absl::Seconds(30)).IgnoreError();
  auto restarted = StartChief();
  ASSERT_FALSE(restarted->WaitForMatch("restored checkpoint of step [1-9]", absl::Minutes(2)).empty());
  ASSERT_EQ(ExitCode(restarted.get()), 0);
  std::string s = Summary();
  double from = Field(s, "restored_from_step");
  EXPECT_GT(from, 0) << s;             // the second commit,
  EXPECT_LT(from, uncommitted) << s;   // never the one killed before its manifest
  EXPECT_EQ(Field(s, "steps"), 800) << s;
}

TEST_F(ClusterTest, CorruptCheckpointIsRefusedAndThePreviousOneUsed) {
  Setup(1, 1, ConsistencyDef::ASYNC, 600);
  auto ps = StartPs(0);
  {
    auto worker = StartWorker(0);
    auto chief = StartChief();
    ASSERT_EQ(ExitCode(chief.get()), 0);
  }
  // Flip a byte of the newest manifest (the final checkpoint, step 600).
  std::string newest = dir_ + "/ckpt/checkpoint-600.manifest";
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << newest;
    f.seekp(5);
    f.put('\x5a');
  }
  auto worker = StartWorker(0);
  auto chief = StartChief();
  ASSERT_TRUE(chief->WaitForLine("checkpoint-600.manifest: manifest checksum mismatch", absl::Minutes(2)));
  ASSERT_FALSE(chief->WaitForMatch("restored checkpoint of step [1-5][0-9]{2} ", absl::Minutes(2)).empty());
  ASSERT_EQ(ExitCode(chief.get()), 0);
  EXPECT_EQ(Field(Summary(), "steps"), 600);
}

}  // namespace
}  // namespace psrt
