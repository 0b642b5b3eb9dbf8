#include "worker/checkpoint_evaluator.h"

#include <cmath>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/graph/model_compiler.h"
#include "common/plan/job_planner.h"
#include "common/snapshot/snapshot_store.h"
#include "common/store/variable.h"
#include "google/protobuf/text_format.h"
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
  // `record_job`: the manifest records job_ (as the chief's do).
  void CommitCheckpoint(int64_t step, int seed, bool record_job = false) {
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
    if (record_job) *m.mutable_job() = job_;
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

// Rows `keep` of a hash table's state (value, slots and ids).
VariableState HashRows(const VariableState& all, const std::vector<int64_t>& keep) {
  VariableState out;
  out.def = all.def;
  out.updates = all.updates;
  const int64_t dim = all.value.shape().dim(1), n = static_cast<int64_t>(keep.size());
  auto pick = [&](const Tensor& from) {
    Tensor t(DT_FLOAT, TensorShape({n, dim}));
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(t.data<float>() + i * dim, from.data<float>() + keep[i] * dim, dim * sizeof(float));
    }
    return t;
  };
  out.value = pick(all.value);
  for (const Tensor& slot : all.slots) out.slots.push_back(pick(slot));
  out.ids = Tensor(DT_INT64, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) out.ids.data<int64_t>()[i] = all.ids.data<int64_t>()[keep[i]];
  return out;
}

// A hash embedding table split by id across two stores: the evaluator's
// rows are the trained ones for ids the checkpoint has, and the initial
// ones (same initializer, same seed) for ids training never made, exactly
// as the live table answers a read-only pull.
TEST_F(CheckpointEvaluatorTest, HashTableRowsComeFromTheCheckpointAndUnseenIdsFromTheInitializer) {
  {
    std::ofstream data(dir_ + ".svm");
    for (int e = 0; e < 40; ++e) data << (e % 3 == 0) << " " << e << ":1 " << (e * 7) % 100 << ":1 " << 60 + e % 40 << ":1\n";
  }
  TrainingJob job;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(name: "hash"
           model {
             sequential {
               layer { name: "bag" inputs: "ids" embedding_bag { input_dim: 0 output_dim: 4 combiner: SUM } }
               layer { dense { units: 1 } }
             }
             loss { kind: SIGMOID_CROSS_ENTROPY }
             metric: "accuracy"
           }
           input { format: LIBSVM batch_size: 8 feature { name: "ids" kind: SPARSE } }
           optimizer { adagrad { learning_rate: 0.1 } }
           steps: 10 seed: 5)pb",
      &job));
  job.mutable_input()->mutable_train()->add_files(dir_ + ".svm");
  job.mutable_input()->mutable_test()->add_files(dir_ + ".svm");
  auto model = CompileModel(job);
  ASSERT_TRUE(model.ok()) << model.status();
  auto optimizer = Optimizer::Create(job.optimizer());
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();

  // The live table: ids 0..49 made and trained a step; 50..99 never seen.
  std::unique_ptr<Variable> table;
  PsSnapshot ps0, ps1;
  ps0.step = ps1.step = 10;
  std::map<std::string, Tensor> dense;
  for (const VariableDef& def : model->variables) {
    if (def.kind() != VariableDef::HASH_TABLE) {
      Tensor t = Tensor::Zeros(DT_FLOAT, *TensorShape::FromProto(def.shape()));
      for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = 0.3f * std::cos(1.3f * i);
      dense[def.name()] = t;
      VariableState st;
      st.def = def;
      st.value = t;
      st.slots = {Tensor::Zeros(DT_FLOAT, t.shape())};
      ps0.variables.push_back(st);
      continue;
    }
    auto made = Variable::Create(def, optimizer->get());
    ASSERT_TRUE(made.ok()) << made.status();
    table = *std::move(made);
    Tensor ids(DT_INT64, TensorShape({50}));
    for (int64_t i = 0; i < 50; ++i) ids.data<int64_t>()[i] = i;
    Tensor grads(DT_FLOAT, TensorShape({50, def.shape().dim(1)}));
    for (int64_t i = 0; i < grads.NumElements(); ++i) grads.data<float>()[i] = (i % 5) - 2.0f;
    ASSERT_TRUE(table->ApplyRows(ids, grads).ok());
    VariableState all = table->CopyState();
    std::vector<int64_t> shard[2];
    for (int64_t r = 0; r < all.ids.NumElements(); ++r) shard[HashShardOf(all.ids.data<int64_t>()[r], 2)].push_back(r);
    for (int k = 0; k < 2; ++k) {
      VariableState piece = HashRows(all, shard[k]);
      piece.def.set_hash_shard(k);
      piece.def.set_hash_shards(2);
      (k == 0 ? ps0 : ps1).variables.push_back(piece);
    }
  }
  ASSERT_NE(table, nullptr);
  CheckpointManifest m;
  m.set_step(10);
  for (auto [path, snap] : {std::pair{"ps-0", &ps0}, {"ps-1", &ps1}}) {
    auto store = SnapshotStore::Open(dir_ + "/" + path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write(*snap).ok());
    m.add_shard()->set_path(path);
  }
  ASSERT_TRUE(ManifestStore(dir_).Commit(m).ok());

  CheckpointEvaluatorOptions o = Options();
  o.job = job;
  auto evaluator = CheckpointEvaluator::Create(o);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  auto got = (*evaluator)->EvaluateStep(10);
  ASSERT_TRUE(got.ok()) << got.status();

  auto plan = PlanJob(job, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string name = model->variables[0].name();
  auto live = MakeEvaluator(job, *plan, 1)(dense, [&](const std::string& t, const Tensor& ids) -> absl::StatusOr<Tensor> {
    EXPECT_EQ(t, name);
    return table->ReadRows(ids, nullptr, /*make_rows=*/false);
  });
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(got->at("examples"), 40);
  EXPECT_NEAR(got->at("loss"), live->at("loss"), 1e-6);
  EXPECT_EQ(got->at("accuracy"), live->at("accuracy"));
  // Zero rows for the unseen ids would be another model: the test can tell.
  auto zeros = MakeEvaluator(job, *plan, 1)(dense, [&](const std::string&, const Tensor& ids) -> absl::StatusOr<Tensor> {
    auto rows = table->ReadRows(ids, nullptr, false);
    for (int64_t i = 0; rows.ok() && i < ids.NumElements(); ++i) {
      if (ids.data<int64_t>()[i] >= 50) {
        for (int64_t d = 0; d < rows->shape().dim(1); ++d) rows->data<float>()[i * rows->shape().dim(1) + d] = 0;
      }
    }
    return rows;
  });
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_GT(std::abs(zeros->at("loss") - got->at("loss")), 1e-4);
}

// A job whose model is not the one the checkpoint records is no damaged
// checkpoint to skip: the run ends saying which job the checkpoint holds.
TEST_F(CheckpointEvaluatorTest, AJobThatIsNotTheRecordedOneIsRefusedSayingSo) {
  CommitCheckpoint(100, 1, /*record_job=*/true);
  SetRunning(false);  // finished: a run that only skipped the checkpoint would end OK
  CheckpointEvaluatorOptions o = Options();
  o.job.set_name("other");
  o.job.mutable_model()->mutable_sequential()->mutable_layer(1)->mutable_dense()->set_units(255);
  auto evaluator = CheckpointEvaluator::Create(o);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  absl::Status s = (*evaluator)->Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("does not match the checkpoint of step 100"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(absl::StrCat("job \"", job_.name(), "\" trained")), absl::string_view::npos) << s;
  EXPECT_EQ((*evaluator)->Status().evaluated, 0);

  // The same job is evaluated (the recorded one, as given).
  auto same = CheckpointEvaluator::Create(Options());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE((*same)->Run().ok());
  EXPECT_EQ((*same)->Status().step, 100);
}

// Without a job, the evaluator takes the one the first committed
// checkpoint records; a checkpoint from before manifests recorded jobs is
// an error at once that says to give one, not an endless wait.
TEST_F(CheckpointEvaluatorTest, TheRecordedJobIsTheOneOfTheFirstCommittedCheckpoint) {
  int looks = 0;
  auto stopped = [&looks] { return ++looks > 3; };
  absl::StatusOr<TrainingJob> none = AwaitRecordedJob(dir_, absl::Milliseconds(1), stopped);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kCancelled) << none.status();

  std::thread commit([this] { CommitCheckpoint(100, 1, /*record_job=*/true); });
  absl::StatusOr<TrainingJob> job = AwaitRecordedJob(dir_, absl::Milliseconds(5), [] { return false; });
  commit.join();
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), job_.name());
  EXPECT_EQ(job->model().SerializeAsString(), job_.model().SerializeAsString());

  dir_ += "_old";
  CommitCheckpoint(200, 2, /*record_job=*/false);
  looks = 0;
  absl::StatusOr<TrainingJob> old = AwaitRecordedJob(dir_, absl::Milliseconds(1), [&looks] { return ++looks > 1000; });
  EXPECT_EQ(old.status().code(), absl::StatusCode::kNotFound) << old.status();
  EXPECT_NE(old.status().message().find("give --job"), absl::string_view::npos) << old.status();
  EXPECT_EQ(looks, 0);
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
