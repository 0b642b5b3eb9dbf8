#include "common/snapshot/snapshot_store.h"

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

PsSnapshot Sample(int64_t step, float fill) {
  PsSnapshot s;
  s.step = step;
  s.global_step = step * 2;
  s.sync_step = step;
  s.worker_next_step = {step, step + 1};
  VariableState dense;
  dense.def.set_name("w");
  dense.def.set_dtype(DT_FLOAT);
  dense.def.mutable_shape()->add_dim(1000);
  dense.value = Tensor(DT_FLOAT, TensorShape({1000}));
  dense.value.flat<float>().setConstant(fill);
  dense.slots.push_back(Tensor::Zeros(DT_FLOAT, TensorShape({1000})));
  dense.updates = 7;
  VariableState hash;
  hash.def.set_name("h");
  hash.def.set_kind(VariableDef::HASH_TABLE);
  hash.value = Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2}));
  hash.ids = Tensor::FromVector<int64_t>({10, 1LL << 40}, TensorShape({2}));
  s.variables = {dense, hash};
  return s;
}

std::string Dir() {
  return ::testing::TempDir() + "/snap_" +
         ::testing::UnitTest::GetInstance()->current_test_info()->name();
}

TEST(SnapshotStoreTest, WritesReadsAndPrunes) {
  SnapshotStoreOptions o;
  o.chunk_bytes = 1000;  // several chunks per tensor
  auto store = SnapshotStore::Open(Dir(), o);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int64_t step : {10, 20, 30}) {
    auto bytes = (*store)->Write(Sample(step, step));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, 8000 + 16 + 16);
  }
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{10, 20, 30}));
  auto snap = (*store)->Read(20);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->global_step, 40);
  EXPECT_EQ(snap->worker_next_step, (std::vector<int64_t>{20, 21}));
  ASSERT_EQ(snap->variables.size(), 2u);
  EXPECT_EQ(snap->variables[0].value.data<float>()[999], 20.0f);
  EXPECT_EQ(snap->variables[0].updates, 7);
  EXPECT_EQ(snap->variables[1].ids.data<int64_t>()[1], 1LL << 40);
  ASSERT_TRUE((*store)->Prune(2).ok());
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ((*store)->Read(10).status().code(), absl::StatusCode::kNotFound);
}

// Flips one bit of the first chunk of variable 0's value at `step`, behind
// the store's back.
void FlipABitOfTheValueOf(int64_t step) {
  rocksdb::DB* db;
  rocksdb::Options o;
  ASSERT_TRUE(rocksdb::DB::Open(o, Dir(), &db).ok());
  std::string key = absl::StrFormat("s/%020d/0/value/000000", step);
  std::string v;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), key, &v).ok());
  v[17] ^= 1;
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), key, v).ok());
  delete db;
}

TEST(SnapshotStoreTest, CorruptChunkIsDataLossNamingTheKey) {
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE((*store)->Write(Sample(5, 1.0f)).ok());
  }
  FlipABitOfTheValueOf(5);
  auto store = SnapshotStore::Open(Dir());
  auto snap = (*store)->Read(5);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(snap.status().message()), HasSubstr("0/value: checksum mismatch"));
}

TEST(SnapshotStoreTest, AnInterruptedWriteLeavesNoSnapshot) {
  SnapshotStoreOptions o;
  o.chunk_bytes = 512;
  o.fault_pause_after_chunks = 3;
  bool paused = false;
  o.on_fault_pause = [&] { paused = true; };
  auto store = SnapshotStore::Open(Dir(), o);
  ASSERT_TRUE((*store)->Write(Sample(1, 1.0f)).ok());
  EXPECT_TRUE(paused);
  // A writer that dies before the index leaves only unindexed data behind;
  // simulate by writing chunks of step 2 without the index.
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{1}));
  EXPECT_EQ((*store)->Read(2).status().code(), absl::StatusCode::kNotFound);
}

TEST(SnapshotStoreTest, SalvageKeepsWhatVerifiesAndSetsTheDamageAside) {
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE((*store)->Write(Sample(5, 1.0f)).ok());
    ASSERT_TRUE((*store)->Write(Sample(6, 2.0f)).ok());
  }
  FlipABitOfTheValueOf(6);
  auto store = SnapshotStore::Open(Dir());
  ASSERT_EQ((*store)->Read(6).status().code(), absl::StatusCode::kDataLoss);
  std::string report;
  auto fresh = SnapshotStore::Salvage(*std::move(store), &report);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_THAT(report, HasSubstr("kept steps [5]"));
  EXPECT_THAT(report, HasSubstr("lost [6 ("));
  EXPECT_EQ((*fresh)->Steps(), (std::vector<int64_t>{5}));
  auto five = (*fresh)->Read(5);
  ASSERT_TRUE(five.ok()) << five.status();
  EXPECT_EQ(five->variables[0].value.data<float>()[0], Sample(5, 1.0f).variables[0].value.data<float>()[0]);
  // New snapshots go into the fresh store; the damaged one is kept aside.
  EXPECT_TRUE((*fresh)->Write(Sample(7, 3.0f)).ok());
  EXPECT_EQ((*fresh)->Steps(), (std::vector<int64_t>{5, 7}));
  const std::string aside = report.substr(report.find("moved to ") + 9);
  auto old = SnapshotStore::OpenReadOnly(aside.substr(0, aside.find(';')));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ((*old)->Steps(), (std::vector<int64_t>{5, 6}));
}

TEST(SnapshotStoreTest, ReadOnlyStoresChangeNothing) {
  EXPECT_EQ(SnapshotStore::OpenReadOnly(Dir() + "/none").status().code(), absl::StatusCode::kNotFound);
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE((*store)->Write(Sample(5, 1.0f)).ok());
  }
  auto ro = SnapshotStore::OpenReadOnly(Dir());
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_TRUE((*ro)->Read(5).ok());
  EXPECT_FALSE((*ro)->Write(Sample(6, 1.0f)).ok());
  EXPECT_FALSE((*ro)->Prune(0).ok());
  EXPECT_EQ((*ro)->Steps(), (std::vector<int64_t>{5}));
}

// After a rollback the store may hold higher-numbered snapshots of an
// abandoned run: the one just written is kept, they go first.
TEST(SnapshotStoreTest, PruneKeepsTheStepJustWritten) {
  auto store = SnapshotStore::Open(Dir());
  for (int64_t step : {100, 200, 400}) ASSERT_TRUE((*store)->Write(Sample(step, 1.0f)).ok());
  ASSERT_TRUE((*store)->Write(Sample(300, 1.0f)).ok());  // back from a restore of 200
  ASSERT_TRUE((*store)->Prune(1, 300).ok());
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{300}));
  ASSERT_TRUE((*store)->Write(Sample(350, 1.0f)).ok());
  ASSERT_TRUE((*store)->Prune(2, 350).ok());
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{300, 350}));
}

}  // namespace
}  // namespace psrt
