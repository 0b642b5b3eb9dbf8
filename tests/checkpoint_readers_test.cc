// The checkpoint readers as users run them, on real files a hostile or
// corrupt checkpoint could hold (issue #28): `checkpoints --verify` and
// `--variable`, `export`, the evaluator and a chief warm-starting from one. Each file here once crashed its reader or
// was read from outside the checkpoint directory; each is now an error
// naming what was wrong and where, with an exit status, never a signal.
// (The PS's restore of such a file is in ps_server_test; the store's own
// checks in snapshot_store_test.)
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/graph/model_compiler.h"
#include "common/plan/job_planner.h"
#include "common/snapshot/snapshot_store.h"
#include "common/snapshot/snapshot_testing.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::RunfilePath;

constexpr int64_t kStep = 10;

class CheckpointReadersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    dir_ = root_ + "/a/b/checkpoints";
    std::filesystem::create_directories(dir_);
    auto job = LoadJob(RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    auto model = CompileModel(job_);
    ASSERT_TRUE(model.ok()) << model.status();
    snapshot_.step = kStep;
    for (const VariableDef& def : model->variables) {
      VariableState st;
      st.def = def;
      auto shape = TensorShape::FromProto(def.shape());
      ASSERT_TRUE(shape.ok());
      st.value = Tensor::Zeros(DT_FLOAT, *shape);
      for (int s = 0; s < 2; ++s) st.slots.push_back(Tensor::Zeros(DT_FLOAT, *shape));  // Adam's
      snapshot_.variables.push_back(std::move(st));
    }
  }

  // A whole store of the job's variables at `path` (absolute).
  void WriteStore(const std::string& path) {
    auto store = SnapshotStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write(snapshot_).ok());
  }

  // `record_job`: the manifest records job_, as the chief's do.
  void Commit(const std::string& shard_path, bool record_job = false) {
    CheckpointManifest m;
    m.set_step(kStep);
    m.set_job_name(job_.name());
    if (record_job) *m.mutable_job() = job_;
    auto* s = m.add_shard();
    s->set_ps_task(0);
    s->set_path(shard_path);
    ASSERT_TRUE(ManifestStore(dir_).Commit(m).ok());
  }

  // Runs a tool to its end: its exit status (-signal if a signal ended it).
  int Run(const std::vector<std::string>& argv, std::unique_ptr<Daemon>* out) {
    auto d = Daemon::Start(argv[0].substr(argv[0].rfind('/') + 1), argv);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return -1000;
    absl::StatusOr<int> status = (*d)->Wait(absl::Minutes(2));
    EXPECT_TRUE(status.ok()) << status.status();
    *out = *std::move(d);
    if (!status.ok()) return -1000;
    return WIFSIGNALED(*status) ? -WTERMSIG(*status) : WEXITSTATUS(*status);
  }

  // The store ps-0 whose first variable's index entry (CRC valid) names a
  // 1 GiB piece, float32[1048576,256], in a sparse data file of that size.
  void WriteStoreNamingAGibibytePiece() {
    WriteStore(dir_ + "/ps-0");
    const std::string store = dir_ + "/ps-0";
    auto file = testing::SnapshotDataFile(store, kStep);
    ASSERT_TRUE(file.ok()) << file.status();
    constexpr int64_t kHuge = int64_t{1} << 30;
    const int64_t size = std::filesystem::file_size(*file);
    ASSERT_EQ(::truncate(file->c_str(), size + kHuge), 0);
    const VariableDef& def = snapshot_.variables[0].def;  // dense_1/kernel [784, 256]
    absl::Status edited = testing::EditSnapshotIndex(store, kStep, [&](SnapshotIndex* index) {
      SnapshotTensor* value = index->mutable_variable(0)->mutable_value();
      value->mutable_shape()->set_dim(0, kHuge / 4 / def.shape().dim(1));
      value->set_bytes(kHuge);
      value->set_offset(size);
      index->mutable_variable(0)->clear_slot();
      index->set_data_bytes(size + kHuge);
    });
    ASSERT_TRUE(edited.ok()) << edited;
  }

  std::string MoreRowsThanTheVariable() const {
    return absl::StrCat("snapshot of step 10: variable ", snapshot_.variables[0].def.name(),
                        ": the checkpoint holds float32\\[1048576,256\\] \\(DENSE\\), the job's "
                        "variable is float32\\[784,256\\] \\(DENSE\\): more rows than the variable has");
  }

  std::string root_, dir_;
  TrainingJob job_;
  PsSnapshot snapshot_;
};

// A manifest (checksum valid) naming a store "../../x" that exists there,
// whole: --verify used to read it and say "ok". Now the checkpoint is
// CORRUPT, naming the path, and nothing outside DIR is opened; the same
// for an absolute path.
TEST_F(CheckpointReadersTest, VerifyRefusesAShardPathOutsideTheDirectory) {
  WriteStore(root_ + "/a/x");
  for (const std::string& path : {std::string("../../x"), root_ + "/a/x"}) {
    Commit(path);
    std::unique_ptr<Daemon> tool;
    const int rc = Run({RunfilePath("chief/checkpoints"), dir_, "--verify"}, &tool);
    EXPECT_EQ(rc, 1) << path;
    EXPECT_FALSE(tool->WaitForMatch("^10 .*CORRUPT: .*checkpoint-.*: shard of ps:0: store path \".*\" leaves "
                                    "the checkpoint directory",
                                    absl::Seconds(10))
                     .empty())
        << path;
    EXPECT_TRUE(tool->WaitForMatch(" ok$", absl::Seconds(1)).empty()) << path;
    // export refuses it the same way.
    std::unique_ptr<Daemon> exporter;
    const int export_rc = Run({RunfilePath("chief/export"), "--job=" + RunfilePath("examples/fashion_mnist_mlp.pbtxt"),
                               "--checkpoint_dir=" + dir_, "--format=tf", "--out=" + root_ + "/out"},
                              &exporter);
    EXPECT_EQ(export_rc, 1) << path;
    EXPECT_FALSE(exporter->WaitForMatch("error: .*store path .* leaves the checkpoint directory", absl::Seconds(10))
                     .empty())
        << path;
  }
}

// An index naming a value of another dtype (int32, its size consistent):
// `checkpoints --variable` aborted reading it as floats. Now: exit 2 and
// the tensor named.
TEST_F(CheckpointReadersTest, VariableOfAnotherDtypeIsAnErrorNotAnAbort) {
  WriteStore(dir_ + "/ps-0");
  Commit("ps-0");
  const std::string name = snapshot_.variables[0].def.name();
  absl::Status edited = testing::EditSnapshotIndex(dir_ + "/ps-0", kStep, [](SnapshotIndex* index) {
    index->mutable_variable(0)->mutable_value()->set_dtype(DT_INT32);
  });
  ASSERT_TRUE(edited.ok()) << edited;
  std::unique_ptr<Daemon> tool;
  const int rc = Run({RunfilePath("chief/checkpoints"), dir_, absl::StrCat("--step=", kStep), "--variable=" + name}, &tool);
  EXPECT_EQ(rc, 2);
  EXPECT_FALSE(tool->WaitForMatch("error: .*snapshot of step 10: .*/value: int32\\[.*\\] as its value \\(values and "
                                  "slots are float32\\)",
                                  absl::Seconds(10))
                   .empty());
}

// An index naming a job variable as 1 GiB in a sparse data file of that
// size (every check against the file passes): export used to allocate and
// read all of it. Now it is refused against the job's shape, before
// allocating, naming both.
TEST_F(CheckpointReadersTest, ExportRefusesAPieceLargerThanTheJobsVariable) {
  WriteStoreNamingAGibibytePiece();
  Commit("ps-0");
  std::unique_ptr<Daemon> exporter;
  const int rc = Run({RunfilePath("chief/export"), "--job=" + RunfilePath("examples/fashion_mnist_mlp.pbtxt"),
                      "--checkpoint_dir=" + dir_, "--format=tf", "--out=" + root_ + "/out"},
                     &exporter);
  EXPECT_EQ(rc, 1);
  EXPECT_FALSE(exporter->WaitForMatch("error: .*" + MoreRowsThanTheVariable(), absl::Seconds(10)).empty());
}

// The evaluator, given only the directory, takes the job the checkpoint
// records and reads the same file through the same checks: that
// checkpoint is reported and skipped (the run goes on to the job's end),
// nothing allocated for it, no signal.
TEST_F(CheckpointReadersTest, TheEvaluatorTakesTheRecordedJobAndSkipsAPieceLargerThanItsVariable) {
  WriteStoreNamingAGibibytePiece();
  Commit("ps-0", /*record_job=*/true);
  ChiefJobState finished;
  finished.set_running(false);
  ASSERT_TRUE(ManifestStore(dir_).WriteJobState(finished).ok());
  std::unique_ptr<Daemon> evaluator;
  const int rc = Run(
      {RunfilePath("worker/evaluator"), "--checkpoint_dir=" + dir_, "--tensorboard_dir=" + root_ + "/logs", "--nice=0"},
      &evaluator);
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(
      evaluator->WaitForMatch("evaluator: job \"fashion_mnist_mlp\", as the checkpoints record it", absl::Seconds(10))
          .empty());
  EXPECT_FALSE(
      evaluator->WaitForMatch("checkpoint of step 10 skipped: .*" + MoreRowsThanTheVariable(), absl::Seconds(10))
          .empty());
  EXPECT_FALSE(evaluator
                   ->WaitForMatch("evaluator: done: 0 checkpoint\\(s\\) evaluated, 0 skipped \\(behind\\), 1 failed",
                                  absl::Seconds(10))
                   .empty());
}

// A job warm-started from that checkpoint: the chief reads the source as
// the export does, refuses the piece against its own variable before
// allocating it, and stops naming the source (exit 2) before it waits for
// any task; nothing is trained from a partial load.
TEST_F(CheckpointReadersTest, AWarmStartFromAPieceLargerThanItsVariableIsRefused) {
  WriteStoreNamingAGibibytePiece();
  Commit("ps-0", /*record_job=*/true);
  TrainingJob job = job_;
  job.set_name("warm");
  job.mutable_warm_start()->set_ckpt_to_initialize_from(dir_);
  job.clear_summary_path();
  job.clear_log_dir();
  const std::string job_path = root_ + "/warm.pbtxt";
  {
    std::ofstream out(job_path);
    out << job.DebugString();
  }
  auto cluster = testing::MakeTestCluster(1, 1, "warm");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<Daemon> chief;
  const int rc = Run({RunfilePath("chief/main"), "--cluster_spec=" + cluster->spec_path, "--job=" + job_path,
                      "--checkpoint_dir=" + root_ + "/warm_checkpoints"},
                     &chief);
  EXPECT_EQ(rc, 2);
  EXPECT_FALSE(chief->WaitForMatch("error: warm_start: .*" + MoreRowsThanTheVariable(), absl::Seconds(10)).empty());
  EXPECT_FALSE(chief->WaitForLine("waiting for", absl::ZeroDuration())) << "it waited for tasks first";
}

}  // namespace
}  // namespace psrt
