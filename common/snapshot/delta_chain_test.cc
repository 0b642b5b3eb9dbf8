// Incremental snapshots in a real store: a chain of deltas reads back whole,
// pruning keeps what a kept delta needs, and a missing, rewritten or corrupt
// link is refused (DATA_LOSS naming it), never read wrong.
#include "common/snapshot/delta_chain.h"

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/snapshot/snapshot_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDim = 2;

// A hash table "h" holding `rows` (id -> first value of its row; the row
// is [v, v + 0.5], slot 0 [-v, -v], slot 1 [2v, 2v]).
VariableState Table(const std::map<int64_t, float>& rows, bool delta, int64_t updates) {
  VariableState st;
  st.def.set_name("h");
  st.def.set_kind(VariableDef::HASH_TABLE);
  st.def.set_dtype(DT_FLOAT);
  st.def.mutable_shape()->add_dim(0);
  st.def.mutable_shape()->add_dim(kDim);
  st.delta = delta;
  st.updates = updates;
  const int64_t n = static_cast<int64_t>(rows.size());
  st.ids = Tensor(DT_INT64, TensorShape({n}));
  st.value = Tensor(DT_FLOAT, TensorShape({n, kDim}));
  st.slots = {Tensor(DT_FLOAT, TensorShape({n, kDim})), Tensor(DT_FLOAT, TensorShape({n, kDim}))};
  int64_t i = 0;
  for (const auto& [id, v] : rows) {
    st.ids.data<int64_t>()[i] = id;
    st.value.data<float>()[2 * i] = v;
    st.value.data<float>()[2 * i + 1] = v + 0.5f;
    for (int k = 0; k < 2; ++k) {
      st.slots[0].data<float>()[2 * i + k] = -v;
      st.slots[1].data<float>()[2 * i + k] = 2 * v;
    }
    ++i;
  }
  return st;
}

VariableState Dense(float fill) {
  VariableState st;
  st.def.set_name("w");
  st.def.set_dtype(DT_FLOAT);
  st.def.mutable_shape()->add_dim(3);
  st.value = Tensor(DT_FLOAT, TensorShape({3}));
  st.value.flat<float>().setConstant(fill);
  st.slots = {Tensor::Zeros(DT_FLOAT, TensorShape({3})), Tensor::Zeros(DT_FLOAT, TensorShape({3}))};
  return st;
}

PsSnapshot Snap(int64_t step, std::vector<VariableState> vars, int64_t base = -1) {
  PsSnapshot s;
  s.step = step;
  s.global_step = step * 10;
  s.sync_step = step;
  s.worker_next_step = {step};
  s.variables = std::move(vars);
  s.delta = base >= 0;
  s.base_step = base;
  return s;
}

// id -> (value row, slot rows) of a whole table.
std::map<int64_t, std::vector<float>> Rows(const VariableState& st) {
  std::map<int64_t, std::vector<float>> out;
  for (int64_t i = 0; i < st.ids.NumElements(); ++i) {
    std::vector<float> r;
    for (const Tensor* t : {&st.value, &st.slots[0], &st.slots[1]}) {
      r.insert(r.end(), t->data<float>() + i * kDim, t->data<float>() + (i + 1) * kDim);
    }
    EXPECT_TRUE(out.emplace(st.ids.data<int64_t>()[i], r).second);
  }
  return out;
}

class DeltaStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/delta_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    auto store = SnapshotStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    // Step 10: ids 1..5 whole; 20: 2 and 4 changed, 7 new; 30: 4 again, 8
    // new; the table at 30 is what `want_` says.
    ASSERT_TRUE(store_->Write(Snap(10, {Dense(1), Table({{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}}, false, 1)})).ok());
    ASSERT_TRUE(store_->Write(Snap(20, {Dense(2), Table({{2, 20}, {4, 40}, {7, 70}}, true, 2)}, 10)).ok());
    ASSERT_TRUE(store_->Write(Snap(30, {Dense(3), Table({{4, 400}, {8, 800}}, true, 3)}, 20)).ok());
    want_ = Table({{1, 1}, {2, 20}, {3, 3}, {4, 400}, {5, 5}, {7, 70}, {8, 800}}, false, 3);
  }
  // Removes step's index behind the store's back.
  void DropIndex(int64_t step) {
    store_.reset();
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_, &db).ok());
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), absl::StrFormat("i/%020d", step)).ok());
    delete db;
    store_ = *SnapshotStore::OpenReadOnly(dir_);
  }
  std::string dir_;
  std::unique_ptr<SnapshotStore> store_;
  VariableState want_;
};

TEST_F(DeltaStoreTest, ChainReadsBackWhole) {
  auto snap = store_->Read(30);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_FALSE(snap->delta);
  EXPECT_EQ(snap->step, 30);
  EXPECT_EQ(snap->global_step, 300);
  EXPECT_EQ(snap->worker_next_step, std::vector<int64_t>{30});
  ASSERT_EQ(snap->variables.size(), 2u);
  EXPECT_EQ(snap->variables[0].value.data<float>()[0], 3);
  const VariableState& h = snap->variables[1];
  EXPECT_FALSE(h.delta);
  EXPECT_EQ(h.updates, 3);
  EXPECT_EQ(Rows(h), Rows(want_));
  // Each link still reads as of its own step.
  auto mid = store_->Read(20);
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_EQ(Rows(mid->variables[1]), Rows(Table({{1, 1}, {2, 20}, {3, 3}, {4, 40}, {5, 5}, {7, 70}}, false, 2)));
}

TEST_F(DeltaStoreTest, PruneKeepsTheBasesOfKeptDeltas) {
  ASSERT_TRUE(store_->Prune(1, 30).ok());
  EXPECT_EQ(store_->Steps(), (std::vector<int64_t>{10, 20, 30}));
  // A full snapshot: the old chain may go.
  ASSERT_TRUE(store_->Write(Snap(40, {Dense(4), want_})).ok());
  ASSERT_TRUE(store_->Prune(1, 40).ok());
  EXPECT_EQ(store_->Steps(), (std::vector<int64_t>{40}));
  ASSERT_TRUE(store_->Write(Snap(50, {Dense(5), Table({{1, 9}}, true, 4)}, 40)).ok());
  ASSERT_TRUE(store_->Prune(1, 50).ok());
  EXPECT_EQ(store_->Steps(), (std::vector<int64_t>{40, 50}));
  store_.reset();
  store_ = *SnapshotStore::Open(dir_);  // the pruned data files are gone, the kept ones read
  auto snap = store_->Read(50);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(Rows(snap->variables[1]).at(1)[0], 9);
  EXPECT_EQ(Rows(snap->variables[1]).at(8)[0], 800);
}

TEST_F(DeltaStoreTest, MissingLinkIsDataLossNamingIt) {
  DropIndex(20);
  auto snap = store_->Read(30);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kDataLoss) << snap.status();
  EXPECT_THAT(std::string(snap.status().message()),
              HasSubstr("snapshot of step 30: its chain of incremental snapshots is broken: step 30 is a delta on step 20, "
                        "whose snapshot is missing"));
  EXPECT_TRUE(store_->Read(10).ok());
}

TEST_F(DeltaStoreTest, MissingBaseDeeperInTheChainIsNamed) {
  DropIndex(10);
  auto snap = store_->Read(30);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(snap.status().message()), HasSubstr("step 20 is a delta on step 10, whose snapshot is missing"));
}

TEST_F(DeltaStoreTest, CorruptBaseDataIsDataLossNamingTheFile) {
  std::string base_file;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(absl::StrFormat("snapshot-%020d-", 10), 0) == 0) base_file = e.path().string();
  }
  ASSERT_FALSE(base_file.empty());
  std::filesystem::resize_file(base_file, std::filesystem::file_size(base_file) / 2);
  auto snap = store_->Read(30);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(snap.status().message()), HasSubstr(base_file));
}

TEST_F(DeltaStoreTest, RewrittenBaseBreaksTheChainVisibly) {
  // Step 20 taken again (a recovery retakes steps): the delta of step 30
  // was taken against the old copy and must not be applied to the new one.
  ASSERT_TRUE(store_->Write(Snap(20, {Dense(2), want_})).ok());
  auto snap = store_->Read(30);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(snap.status().message()), HasSubstr("since written again"));
}

TEST_F(DeltaStoreTest, DeltaOnAMissingBaseIsNotWritten) {
  auto w = store_->Write(Snap(40, {Dense(4), Table({{1, 2}}, true, 4)}, 35));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition) << w.status();
  EXPECT_EQ(store_->Steps(), (std::vector<int64_t>{10, 20, 30}));
}

TEST(ApplyDeltaTest, RefusesInconsistentDeltas) {
  const VariableState base = Table({{1, 1}, {2, 2}}, false, 1);
  // An id twice in the delta.
  std::vector<VariableState> d = {Table({{5, 5}, {6, 6}}, true, 2)};
  d[0].ids.data<int64_t>()[1] = 5;
  auto r = ApplyDelta({base}, d, "here");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("here: variable h: the delta holds id 5 twice"));
  // Rows of a table the base lacks.
  VariableState other = Table({{1, 1}}, true, 2);
  other.def.set_name("g");
  r = ApplyDelta({base}, {other}, "here");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("its base has no such variable"));
  // Rows of another width, and a slot missing.
  VariableState wide = Table({{1, 1}}, true, 2);
  wide.def.mutable_shape()->set_dim(1, 3);
  EXPECT_EQ(ApplyDelta({base}, {wide}, "here").status().code(), absl::StatusCode::kDataLoss);
  VariableState short_slots = Table({{1, 1}}, true, 2);
  short_slots.slots.pop_back();
  r = ApplyDelta({base}, {short_slots}, "here");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("the delta has 1 slots, expected 2"));
  VariableState bad_value = Table({{1, 1}}, true, 2);
  bad_value.value = Tensor(DT_FLOAT, TensorShape({2, kDim}));
  EXPECT_EQ(ApplyDelta({base}, {bad_value}, "here").status().code(), absl::StatusCode::kDataLoss);
  // A fixed table: rows by number, in range, into the base in place.
  VariableState slice = Table({{4, 1}, {5, 2}, {6, 3}}, false, 1);
  slice.def.set_kind(VariableDef::FIXED_TABLE);
  slice.def.mutable_shape()->set_dim(0, 10);
  slice.def.set_row_begin(4);
  slice.def.set_row_end(7);
  slice.ids = Tensor();
  VariableState rows = Table({{6, 60}}, true, 2);
  rows.def = slice.def;
  auto fixed = ApplyDelta({slice}, {rows}, "here");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ((*fixed)[0].value.data<float>()[4], 60);  // row 6 = the third of [4, 7)
  EXPECT_EQ((*fixed)[0].slots[1].data<float>()[5], 120);
  EXPECT_EQ((*fixed)[0].value.data<float>()[0], 1);
  EXPECT_EQ((*fixed)[0].updates, 2);
  rows.ids.data<int64_t>()[0] = 7;
  r = ApplyDelta({slice}, {rows}, "here");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("row 7, outside the base's [4, 7)"));
  // And a hash table: 2 replaced, 3 appended.
  auto ok = ApplyDelta({base}, {Table({{2, 20}, {3, 30}}, true, 2)}, "here");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(Rows((*ok)[0]), Rows(Table({{1, 1}, {2, 20}, {3, 30}}, false, 2)));
  EXPECT_EQ((*ok)[0].updates, 2);
}

}  // namespace
}  // namespace psrt
