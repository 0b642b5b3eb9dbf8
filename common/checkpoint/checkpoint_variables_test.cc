#include "common/checkpoint/checkpoint_variables.h"

#include <cstring>

#include "common/checkpoint/checkpoint_manifest.h"
#include "common/plan/job_planner.h"
#include "common/snapshot/snapshot_store.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

class CheckpointVariablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    auto model = CompileModel(job_);
    ASSERT_TRUE(model.ok()) << model.status();
    defs_ = model->variables;
  }

  // A value for rows [begin, end) of `def`: element i of the whole
  // variable is i * 0.5 + salt.
  static Tensor Rows(const VariableDef& def, int64_t begin, int64_t end, float salt = 0) {
    std::vector<int64_t> dims(def.shape().dim().begin(), def.shape().dim().end());
    int64_t row = 1;
    for (size_t k = 1; k < dims.size(); ++k) row *= dims[k];
    dims[0] = end - begin;
    Tensor t = Tensor::Zeros(DT_FLOAT, TensorShape(dims));
    for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = (begin * row + i) * 0.5f + salt;
    return t;
  }

  // A snapshot's piece of `def`: rows [begin, end), or all of them (0, 0).
  static VariableState State(const VariableDef& def, int64_t begin, int64_t end) {
    VariableState st;
    st.def = def;
    st.def.set_row_begin(begin);
    st.def.set_row_end(end);
    if (begin == 0 && end == 0) end = def.shape().dim(0);
    st.value = Rows(def, begin, end);
    for (int s = 0; s < 2; ++s) st.slots.push_back(Rows(def, begin, end, 100.0f + s));  // Adam's m and v
    return st;
  }

  // Writes `snapshot` as the store of `path` in the checkpoint dir.
  void WriteStore(const std::string& path, const PsSnapshot& snapshot) {
    auto store = SnapshotStore::Open(dir_ + "/" + path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write(snapshot).ok());
  }

  void Commit(int64_t step, const std::vector<std::string>& paths) {
    CheckpointManifest m;
    m.set_step(step);
    m.set_job_name(job_.name());
    for (size_t i = 0; i < paths.size(); ++i) {
      auto* s = m.add_shard();
      s->set_ps_task(static_cast<int>(i));
      s->set_path(paths[i]);
    }
    ASSERT_TRUE(ManifestStore(dir_).Commit(m).ok());
  }

  std::string dir_ = ::testing::TempDir() + "/ckpt_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  TrainingJob job_;
  std::vector<VariableDef> defs_;
};

// Two stores, the first dense kernel split by rows between them: the
// export sees each variable whole, values only (no slots).
TEST_F(CheckpointVariablesTest, VariablesSplitAcrossStoresComeBackWhole) {
  PsSnapshot a, b;
  a.step = b.step = 40;
  for (const VariableDef& def : defs_) {
    const int64_t rows = def.shape().dim(0);
    if (def.name() == "dense_1/kernel") {
      a.variables.push_back(State(def, 0, 300));
      b.variables.push_back(State(def, 300, rows));
    } else {
      b.variables.push_back(State(def, 0, 0));
    }
  }
  WriteStore("ps-0", a);
  WriteStore("ps-1", b);
  Commit(40, {"ps-0", "ps-1"});
  auto ckpt = ReadCheckpointVariables(dir_, -1, job_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(ckpt->step, 40);
  EXPECT_EQ(ckpt->job_name, "fashion_mnist_mlp");
  ASSERT_EQ(ckpt->values.size(), defs_.size());
  for (const VariableDef& def : defs_) {
    const Tensor& t = ckpt->values.at(def.name());
    Tensor want = Rows(def, 0, def.shape().dim(0));
    ASSERT_EQ(t.shape(), want.shape()) << def.name();
    EXPECT_EQ(0, std::memcmp(t.raw_data(), want.raw_data(), want.TotalBytes())) << def.name();
  }
}

TEST_F(CheckpointVariablesTest, MissingDirectoryUnknownStepAndAbsentVariablesAreNamed) {
  auto missing = ReadCheckpointVariables(dir_ + "/nowhere", -1, job_);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no checkpoint directory"), absl::string_view::npos);

  PsSnapshot a;
  a.step = 10;
  a.variables.push_back(State(defs_[0], 0, 0));  // only the first variable
  WriteStore("ps-0", a);
  Commit(10, {"ps-0"});
  auto unknown = ReadCheckpointVariables(dir_, 11, job_);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("it has steps 10"), absl::string_view::npos) << unknown.status();
  auto partial = ReadCheckpointVariables(dir_, 10, job_);
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kDataLoss) << partial.status();
  EXPECT_NE(partial.status().message().find(defs_[1].name()), absl::string_view::npos) << partial.status();
}

TEST_F(CheckpointVariablesTest, ShardPathOutsideTheDirectoryIsRefused) {
  Commit(5, {"../elsewhere"});
  auto ckpt = ReadCheckpointVariables(dir_, 5, job_);
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(ckpt.status().message().find("leaves the checkpoint directory"), absl::string_view::npos) << ckpt.status();
}

}  // namespace
}  // namespace psrt
