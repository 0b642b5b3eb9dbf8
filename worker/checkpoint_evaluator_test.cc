#include "worker/checkpoint_evaluator.h"

#include <cmath>
#include <fstream>
#include <thread>

#include "common/checkpoint/checkpoint_manifest.h"
#include "common/graph/model_compiler.h"
#include "common/plan/job_planner.h"
#include "common/snapshot/snapshot_store.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(NextCheckpointStepTest, TheNewestAfterTheLastAndHowManyItPasses) {
  int superseded = -1;
  EXPECT_EQ(NextCheckpointStep({}, -1, &superseded), -1);
  EXPECT_EQ(superseded, 0);
  EXPECT_EQ(NextCheckpointStep({100, 200, 300}, -1, &superseded), 300);
  EXPECT_EQ(superseded, 2);
  EXPECT_EQ(NextCheckpointStep({100, 200, 300}, 200, &superseded), 300);
  EXPECT_EQ(superseded, 0);
  EXPECT_EQ(NextCheckpointStep({100, 200, 300}, 300, &superseded), -1);
  EXPECT_EQ(superseded, 0);
}

class CheckpointEvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    job_.mutable_eval()->set_max_examples(500);
    auto model = CompileModel(job_);
    ASSERT_TRUE(model.ok()) << model.status();
    defs_ = model->variables;
  }

  // Small weights of one pattern per `seed`, whole, with Adam's two slots.
  std::map<std::string, Tensor> Values(int seed) const {
    std::map<std::string, Tensor> out;
    for (const VariableDef& def : defs_) {
      std::vector<int64_t> dims(def.shape().dim().begin(), def.shape().dim().end());
      Tensor t = Tensor::Zeros(DT_FLOAT, TensorShape(dims));
      for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = 0.05f * std::sin(0.37f * i + seed);
      out[def.name()] = t;
    }
    return out;
  }

  // One store (ps-0) holding every variable of Values(seed), committed at `step`.
  void CommitCheckpoint(int64_t step, int seed) {
    PsSnapshot snap;
    snap.step = step;
    std::map<std::string, Tensor> values = Values(seed);
    for (const VariableDef& def : defs_) {
      VariableState st;
      st.def = def;
      st.value = values.at(def.name());
      st.slots = {Tensor::Zeros(DT_FLOAT, st.value.shape()), Tensor::Zeros(DT_FLOAT, st.value.shape())};
      snap.variables.push_back(st);
    }
    auto store = SnapshotStore::Open(dir_ + "/ps-0");
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write(snap).ok());
    CheckpointManifest m;
    m.set_step(step);
    m.set_job_name(job_.name());
    m.add_shard()->set_path("ps-0");
    ASSERT_TRUE(ManifestStore(dir_).Commit(m).ok());
  }

  void SetRunning(bool running) {
    ChiefJobState state;
    state.set_running(running);
    ASSERT_TRUE(ManifestStore(dir_).WriteJobState(state).ok());
  }

  // Polls `done` until it holds or 60 s pass (the evaluator's own thread
  // moves the state; an evaluation of 500 examples takes well under that).
  static bool WaitFor(const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!done()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return true;
  }

  CheckpointEvaluatorOptions Options() {
    CheckpointEvaluatorOptions o;
    o.job = job_;
    o.checkpoint_dir = dir_;
    o.poll_interval = absl::Milliseconds(20);
    o.on_metrics = [this](int64_t step, const std::map<std::string, float>&) {
      absl::MutexLock lock(&mu_);
      reported_.push_back(step);
    };
    return o;
  }

  std::string dir_ = ::testing::TempDir() + "/ckpt_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  TrainingJob job_;
  std::vector<VariableDef> defs_;
  absl::Mutex mu_;
  std::vector<int64_t> reported_ ABSL_GUARDED_BY(mu_);
};

// Two checkpoints already there: only the newer is evaluated, with its own
// weights; a corrupt one committed later is reported and skipped; the job's
// end (job_state running=false) ends the run.
TEST_F(CheckpointEvaluatorTest, EvaluatesTheNewestSkipsACorruptOneAndEndsWithTheJob) {
  CommitCheckpoint(100, 1);
  CommitCheckpoint(200, 2);
  SetRunning(true);
  auto evaluator = CheckpointEvaluator::Create(Options());
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  absl::Status run_status = absl::UnknownError("not run");
  std::thread run([&] { run_status = (*evaluator)->Run(); });

  ASSERT_TRUE(WaitFor([&] { return (*evaluator)->Status().evaluated == 1; }));
  EvaluatorStatus st = (*evaluator)->Status();
  EXPECT_EQ(st.step, 200);
  EXPECT_EQ(st.skipped, 1);
  EXPECT_FALSE(st.job_finished);
  // The same numbers as the planner's evaluator on step 200's weights, and
  // not those of step 100's.
  auto plan = PlanJob(job_, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto want = MakeEvaluator(job_, *plan, 1)(Values(2), RowReader());
  auto other = MakeEvaluator(job_, *plan, 1)(Values(1), RowReader());
  ASSERT_TRUE(want.ok() && other.ok());
  EXPECT_EQ(st.metrics.at("examples"), 500);
  EXPECT_NEAR(st.metrics.at("loss"), want->at("loss"), 1e-6);
  EXPECT_NE(st.metrics.at("loss"), other->at("loss"));
  EXPECT_EQ(st.metrics.at("accuracy"), want->at("accuracy"));

  // A manifest that does not verify: counted, reported, not fatal.
  std::ofstream(ManifestStore(dir_).PathFor(300)) << "not a manifest";
  ASSERT_TRUE(WaitFor([&] { return (*evaluator)->Status().failed == 1; }));

  SetRunning(false);
  run.join();
  EXPECT_TRUE(run_status.ok()) << run_status;
  st = (*evaluator)->Status();
  EXPECT_TRUE(st.job_finished);
  EXPECT_EQ(st.step, 200);
  EXPECT_EQ(st.evaluated, 1);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(reported_, std::vector<int64_t>({200}));
}

// Before the chief has written anything, the evaluator waits (a missing job
// state is not the end), and Stop() ends the wait at once.
TEST_F(CheckpointEvaluatorTest, WaitsForAChiefThatHasNotStartedUntilStopped) {
  CheckpointEvaluatorOptions o = Options();
  o.poll_interval = absl::Hours(1);  // only Stop() can end the wait in time
  auto evaluator = CheckpointEvaluator::Create(o);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  std::atomic<bool> returned{false};
  std::thread run([&] {
    EXPECT_TRUE((*evaluator)->Run().ok());
    returned = true;
  });
  (*evaluator)->Stop();
  run.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ((*evaluator)->Status().evaluated, 0);
  EXPECT_FALSE((*evaluator)->Status().job_finished);
}

TEST_F(CheckpointEvaluatorTest, AJobWithoutATestSplitIsRefused) {
  CheckpointEvaluatorOptions o = Options();
  o.job.mutable_input()->mutable_test()->clear_files();
  auto evaluator = CheckpointEvaluator::Create(o);
  EXPECT_EQ(evaluator.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(evaluator.status().message().find("input.test"), absl::string_view::npos);
}

}  // namespace
}  // namespace psrt
