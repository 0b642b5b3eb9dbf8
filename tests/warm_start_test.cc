// Warm start (job.warm_start, TensorFlow's WarmStartSettings) across real
// processes: a chief, two PS and a worker train the Fashion-MNIST MLP to a
// checkpoint; a second job starts from it (one layer renamed, one variable
// left out), and its own first checkpoint (step 0, before any update) must
// hold the source's trained values and evaluate as they do, the variable
// left out its fresh initial value. A source of another shape is refused
// before training, naming the variable; a warm-started job restarted after
// its first checkpoint restores its own, even with the source gone.
#include "common/plan/warm_start.h"

#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "common/graph/model_compiler.h"
#include "common/initializer.h"
#include "common/plan/job_planner.h"
#include "common/snapshot/snapshot_store.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()) == 0;
}

class WarmStartTest : public testing::TrainingClusterTest {
 protected:
  void SetUp() override {
    Setup(/*ps=*/2, /*workers=*/1, ConsistencyDef::ASYNC, /*steps=*/300);
    job_.clear_log_dir();
    source_job_ = job_;
  }

  // Runs job_ (checkpoints in `ckpt`) on fresh daemons to its end; the
  // chief's exit code.
  int Run(const std::string& leg, const std::string& ckpt) {
    job_.mutable_checkpoint()->set_dir(ckpt);
    WriteJob();
    std::vector<std::unique_ptr<Daemon>> ps;
    for (int i = 0; i < 2; ++i) ps.push_back(StartPs(i));
    auto worker = StartWorker(0);
    auto chief = StartChief();
    if (chief == nullptr) return -1;
    const int code = ExitCode(chief.get());
    EXPECT_EQ(code, 0) << leg;
    if (code == 0) {
      EXPECT_EQ(ExitCode(worker.get()), 0) << leg;
    }
    return code;
  }

  // Trains the source job: 300 steps, its checkpoint in dir_/source.
  std::map<std::string, Tensor> TrainSource() {
    source_job_.mutable_checkpoint()->set_every_steps(source_job_.steps());
    job_ = source_job_;
    if (Run("source", dir_ + "/source") != 0) return {};
    source_job_ = job_;
    auto vars = ReadCheckpointVariables(dir_ + "/source", -1, source_job_);
    EXPECT_TRUE(vars.ok()) << vars.status();
    if (!vars.ok()) return {};
    EXPECT_EQ(vars->step, source_job_.steps());
    return vars->values;
  }

  // The source's model with its first dense layer named "hidden", warm
  // started from dir_/source: hidden/* from dense_1/*, every other variable
  // but dense_3/bias under its own name.
  TrainingJob WarmJob(int64_t steps) {
    TrainingJob job = source_job_;
    job.mutable_model()->mutable_sequential()->mutable_layer(1)->set_name("hidden");
    job.set_steps(steps);
    job.mutable_checkpoint()->set_every_steps(0);
    WarmStartDef* warm = job.mutable_warm_start();
    warm->set_ckpt_to_initialize_from(dir_ + "/source");
    warm->set_vars_to_warm_start("hidden/.*|dense_3/kernel|dense_5/.*");
    (*warm->mutable_var_name_to_prev_var_name())["hidden/kernel"] = "dense_1/kernel";
    (*warm->mutable_var_name_to_prev_var_name())["hidden/bias"] = "dense_1/bias";
    return job;
  }

  // Loss and accuracy of `values` on 2000 test examples.
  std::map<std::string, float> Evaluate(const TrainingJob& job, const std::map<std::string, Tensor>& values) {
    auto plan = PlanJob(job, 1);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    auto m = MakeEvaluator(job, *plan, 1)(values, nullptr);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : std::map<std::string, float>{};
  }

  // What a cold start of `job` gives every variable.
  static std::map<std::string, Tensor> InitialValues(const TrainingJob& job) {
    std::map<std::string, Tensor> out;
    auto model = CompileModel(job);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return out;
    for (const VariableDef& v : model->variables) {
      auto shape = TensorShape::FromProto(v.shape());
      EXPECT_TRUE(shape.ok());
      Tensor t(DT_FLOAT, *shape);
      EXPECT_TRUE(InitializeRows(v.initializer(), *shape, v.seed(), v.name(), 0, shape->dim(0), t.data<float>()).ok());
      out[v.name()] = std::move(t);
    }
    return out;
  }

  TrainingJob source_job_;
};

TEST_F(WarmStartTest, SecondJobStartsFromTheTrainedWeights) {
  std::map<std::string, Tensor> source = TrainSource();
  ASSERT_FALSE(source.empty());
  const std::map<std::string, float> trained = Evaluate(source_job_, source);

  job_ = WarmJob(/*steps=*/20);
  ASSERT_EQ(Run("warm", dir_ + "/warm"), 0);
  // The warm job's checkpoint of step 0: what it started from.
  auto first = ReadCheckpointVariables(dir_ + "/warm", 0, job_);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::map<std::string, Tensor>& start = first->values;
  const std::map<std::string, Tensor> cold = InitialValues(job_);
  ASSERT_EQ(start.size(), 6u);
  EXPECT_TRUE(SameBytes(start.at("hidden/kernel"), source.at("dense_1/kernel")));
  EXPECT_TRUE(SameBytes(start.at("hidden/bias"), source.at("dense_1/bias")));
  EXPECT_TRUE(SameBytes(start.at("dense_3/kernel"), source.at("dense_3/kernel")));
  EXPECT_TRUE(SameBytes(start.at("dense_5/kernel"), source.at("dense_5/kernel")));
  EXPECT_TRUE(SameBytes(start.at("dense_5/bias"), source.at("dense_5/bias")));
  // Left out: its own initializer (zeros), not the source's trained bias.
  EXPECT_TRUE(SameBytes(start.at("dense_3/bias"), cold.at("dense_3/bias")));
  EXPECT_FALSE(SameBytes(source.at("dense_3/bias"), cold.at("dense_3/bias")));
  EXPECT_FALSE(SameBytes(start.at("hidden/kernel"), cold.at("hidden/kernel")));

  // The PS created them from TENSOR initializers; their snapshots record
  // the definition without those values (the snapshot's value is the one).
  int tensor_initialized = 0;
  for (int p = 0; p < 2; ++p) {
    auto store = SnapshotStore::OpenReadOnly(absl::StrCat(dir_, "/warm/ps-", p));
    ASSERT_TRUE(store.ok()) << store.status();
    auto snap = (*store)->Read(0);
    ASSERT_TRUE(snap.ok()) << snap.status();
    for (const VariableState& v : snap->variables) {
      if (v.def.initializer().kind() != InitializerDef::TENSOR) continue;
      ++tensor_initialized;
      EXPECT_FALSE(v.def.initializer().has_tensor()) << v.def.name();
    }
  }
  EXPECT_EQ(tensor_initialized, 5);

  const std::map<std::string, float> warm = Evaluate(job_, start);
  const std::map<std::string, float> fresh = Evaluate(job_, cold);
  std::cerr << "FIGURE: source after 300 steps: loss " << trained.at("loss") << " accuracy " << trained.at("accuracy")
            << "; warm job at step 0: loss " << warm.at("loss") << " accuracy " << warm.at("accuracy")
            << "; cold job at step 0: loss " << fresh.at("loss") << " accuracy " << fresh.at("accuracy") << std::endl;
  // A cold start is at chance (about 0.1); the warm one near the source.
  EXPECT_LT(fresh.at("accuracy"), 0.3f);
  EXPECT_GT(warm.at("accuracy"), 0.6f);
  EXPECT_GT(warm.at("accuracy"), trained.at("accuracy") - 0.15f);
  EXPECT_LT(warm.at("loss"), fresh.at("loss") / 2);
}

// The same mechanism under multi_worker_mirrored: each worker's replica is
// created from the source's values (taken under the PS strategy, two PS).
TEST_F(WarmStartTest, MirroredWorkersStartFromAParameterServerCheckpoint) {
  source_job_.set_steps(100);
  std::map<std::string, Tensor> source = TrainSource();
  ASSERT_FALSE(source.empty());

  auto mirrored = testing::MakeTestCluster(0, 2, name_ + "-mirrored");
  ASSERT_TRUE(mirrored.ok()) << mirrored.status();
  cluster_ = *mirrored;
  job_ = WarmJob(/*steps=*/10);
  job_.mutable_strategy()->mutable_multi_worker_mirrored();
  job_.mutable_consistency()->set_mode(ConsistencyDef::SYNC);
  job_.mutable_checkpoint()->set_dir(dir_ + "/mirrored");
  WriteJob();
  // A replica's store beside the manifests, as a PS's.
  std::vector<std::unique_ptr<Daemon>> workers;
  for (int i = 0; i < 2; ++i) workers.push_back(StartWorker(i, {"--snapshot_dir=" + dir_}));
  auto chief = StartChief();
  ASSERT_NE(chief, nullptr);
  ASSERT_EQ(ExitCode(chief.get()), 0);
  auto first = ReadCheckpointVariables(dir_ + "/mirrored", 0, job_);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::map<std::string, Tensor>& start = first->values;
  EXPECT_TRUE(SameBytes(start.at("hidden/kernel"), source.at("dense_1/kernel")));
  EXPECT_TRUE(SameBytes(start.at("dense_3/kernel"), source.at("dense_3/kernel")));
  EXPECT_TRUE(SameBytes(start.at("dense_5/bias"), source.at("dense_5/bias")));
  EXPECT_TRUE(SameBytes(start.at("dense_3/bias"), InitialValues(job_).at("dense_3/bias")));
  const std::map<std::string, float> warm = Evaluate(job_, start);
  std::cerr << "FIGURE: multi_worker_mirrored job at step 0, warm from 100 PS steps: accuracy " << warm.at("accuracy")
            << std::endl;
  EXPECT_GT(warm.at("accuracy"), 0.5f);
}

TEST_F(WarmStartTest, AnotherShapeIsRefusedBeforeTrainingNamingTheVariable) {
  source_job_.set_steps(10);
  ASSERT_FALSE(TrainSource().empty());

  // dense_3 with 64 units: dense_3/kernel is [256,64] here, [256,128] there.
  job_ = WarmJob(/*steps=*/20);
  job_.mutable_model()->mutable_sequential()->mutable_layer(3)->mutable_dense()->set_units(64);
  job_.mutable_checkpoint()->set_dir(dir_ + "/mismatch");
  WriteJob();
  // Only the chief: it refuses before it waits for any task.
  auto chief = StartChief();
  ASSERT_NE(chief, nullptr);
  EXPECT_NE(ExitCode(chief.get(), absl::Minutes(1)), 0);
  const std::string said = absl::StrJoin(chief->Lines(), "\n");
  EXPECT_NE(said.find("warm_start: variable dense_3/kernel is float32[256,64] (DENSE) in this job, "
                      "float32[256,128] (DENSE) in the checkpoint of step 10 in " +
                      dir_ + "/source: another shape"),
            std::string::npos)
      << said;
  struct stat st;
  EXPECT_NE(stat((dir_ + "/mismatch/checkpoint-0.manifest").c_str(), &st), 0) << "it must not have started";

  // Its own checkpoint directory as the source: refused, not "restored".
  job_ = WarmJob(/*steps=*/20);
  job_.mutable_checkpoint()->set_dir(dir_ + "/source/");
  WriteJob();
  auto self = StartChief();
  ASSERT_NE(self, nullptr);
  EXPECT_NE(ExitCode(self.get(), absl::Minutes(1)), 0);
  EXPECT_TRUE(self->WaitForLine("is this job's own checkpoint directory", absl::Seconds(5)));

  // The other refusals, by the same reader the chief calls.
  auto model = CompileModel(WarmJob(20));
  ASSERT_TRUE(model.ok());
  auto refused = [&](const TrainingJob& job) {
    absl::StatusOr<WarmStartValues> w = ReadWarmStart(job, model->variables);
    EXPECT_FALSE(w.ok());
    return std::string(w.status().message());
  };
  TrainingJob missing = WarmJob(20);
  (*missing.mutable_warm_start()->mutable_var_name_to_prev_var_name())["hidden/kernel"] = "dense_9/kernel";
  EXPECT_NE(refused(missing).find("variable hidden/kernel (as dense_9/kernel) is not in the checkpoint of step 10"),
            std::string::npos)
      << refused(missing);
  TrainingJob unmatched_key = WarmJob(20);
  unmatched_key.mutable_warm_start()->set_vars_to_warm_start("dense_5/.*");
  EXPECT_NE(refused(unmatched_key).find("var_name_to_prev_var_name: hidden/bias is not a variable"), std::string::npos)
      << refused(unmatched_key);
  TrainingJob none = WarmJob(20);
  none.mutable_warm_start()->clear_var_name_to_prev_var_name();
  none.mutable_warm_start()->set_vars_to_warm_start("nothing");
  EXPECT_NE(refused(none).find("matches none of the job's variables"), std::string::npos) << refused(none);
  TrainingJob no_step = WarmJob(20);
  no_step.mutable_warm_start()->set_step(7);
  EXPECT_NE(refused(no_step).find("no committed checkpoint at step 7"), std::string::npos) << refused(no_step);
  TrainingJob nowhere = WarmJob(20);
  nowhere.mutable_warm_start()->set_ckpt_to_initialize_from(dir_ + "/nowhere");
  EXPECT_NE(refused(nowhere).find("no checkpoint directory"), std::string::npos) << refused(nowhere);

  // A hash table has no whole value: refused before the source is read.
  VariableDef table;
  table.set_name("hidden/kernel");
  table.set_kind(VariableDef::HASH_TABLE);
  absl::StatusOr<WarmStartValues> hashed = ReadWarmStart(WarmJob(20), {table});
  ASSERT_FALSE(hashed.ok());
  EXPECT_NE(hashed.status().message().find("variable hidden/kernel is a hash table"), std::string::npos)
      << hashed.status();

  // Fields refused at parse, naming them.
  auto parse_error = [](const std::function<void(WarmStartDef*)>& edit) {
    TrainingJob bad;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
        "model { sequential { layer { dense { units: 10 } } } } input { batch_size: 8 train { files: \"x\" } }", &bad));
    bad.mutable_warm_start()->set_ckpt_to_initialize_from("/some/dir");
    edit(bad.mutable_warm_start());
    std::string text;
    google::protobuf::TextFormat::PrintToString(bad, &text);
    auto parsed = ParseJob(text, "bad.pbtxt");
    EXPECT_FALSE(parsed.ok());
    return std::string(parsed.status().message());
  };
  EXPECT_NE(parse_error([](WarmStartDef* w) {
              w->set_vars_to_warm_start("(unclosed");
            }).find("warm_start.vars_to_warm_start: \"(unclosed\" is not an RE2 regular expression"),
            std::string::npos);
  EXPECT_NE(parse_error([](WarmStartDef* w) {
              w->clear_ckpt_to_initialize_from();
            }).find("warm_start.ckpt_to_initialize_from: empty"),
            std::string::npos);
  EXPECT_NE(parse_error([](WarmStartDef* w) { w->set_step(-2); }).find("warm_start.step: -2 is negative"),
            std::string::npos);
  EXPECT_NE(parse_error([](WarmStartDef* w) {
              (*w->mutable_var_name_to_prev_var_name())["a"] = "";
            }).find("warm_start.var_name_to_prev_var_name: an empty name"),
            std::string::npos);
}

TEST_F(WarmStartTest, RestartedJobRestoresItsOwnCheckpointNotTheSource) {
  source_job_.set_steps(50);
  std::map<std::string, Tensor> source = TrainSource();
  ASSERT_FALSE(source.empty());

  job_ = WarmJob(/*steps=*/3000);
  job_.mutable_checkpoint()->set_dir(dir_ + "/warm");
  job_.mutable_checkpoint()->set_every_steps(500);
  job_.mutable_checkpoint()->set_keep(10);
  WriteJob();
  std::vector<std::unique_ptr<Daemon>> ps;
  for (int i = 0; i < 2; ++i) ps.push_back(StartPs(i));
  auto worker = StartWorker(0);
  auto chief = StartChief();
  ASSERT_NE(chief, nullptr);
  ASSERT_TRUE(chief->WaitForLine("warm start: 5 of 6 variables", absl::Minutes(2)));
  // Its first checkpoint after step 0 (ASYNC: at the first step past 500).
  const std::string line = chief->WaitForMatch("checkpoint of step [1-9][0-9]* committed", absl::Minutes(3));
  ASSERT_FALSE(line.empty());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, std::regex("checkpoint of step ([0-9]+) committed")));
  const int64_t committed = std::stoll(m[1]);
  chief->Kill(SIGKILL);
  (void)chief->Wait(absl::Minutes(1));
  // The source gone: a restart that read it would fail.
  ASSERT_EQ(std::rename((dir_ + "/source").c_str(), (dir_ + "/source-gone").c_str()), 0);

  auto again = StartChief();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->WaitForLine("warm_start ignored: the job has checkpoints of its own", absl::Minutes(1)));
  EXPECT_EQ(ExitCode(again.get()), 0);
  const std::string said = absl::StrJoin(again->Lines(), "\n");
  EXPECT_EQ(said.find("warm start: "), std::string::npos) << said;
  const double restored = Field(Summary(), "restored_from_step");
  std::cerr << "FIGURE: the restarted warm-started job restored its own step " << restored << std::endl;
  EXPECT_GE(restored, committed);
  EXPECT_EQ(ExitCode(worker.get()), 0);
  // Its step-0 checkpoint still holds the source's values, and its last
  // has trained on from them.
  auto first = ReadCheckpointVariables(dir_ + "/warm", 0, job_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(SameBytes(first->values.at("hidden/kernel"), source.at("dense_1/kernel")));
  auto last = ReadCheckpointVariables(dir_ + "/warm", -1, job_);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->step, 3000);
}

}  // namespace
}  // namespace psrt
