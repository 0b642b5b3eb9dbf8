#include "common/snapshot/snapshot_store.h"

#include <dirent.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/buffer_pool.h"
#include "common/snapshot/snapshot_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/snapshot.pb.h"
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

// The data files in Dir(), by name.
std::vector<std::string> DataFiles() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(Dir())) {
    std::string name = e.path().filename().string();
    if (absl::EndsWith(name, ".data")) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
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
  store->reset();  // joins the thread unlinking step 10's file
  EXPECT_EQ(DataFiles().size(), 2u);
}

// The path of `step`'s data file.
std::string DataFileOf(int64_t step) {
  const std::string prefix = absl::StrFormat("snapshot-%020d-", step);
  for (const std::string& name : DataFiles()) {
    if (absl::StartsWith(name, prefix)) return Dir() + "/" + name;
  }
  ADD_FAILURE() << "no data file of step " << step;
  return "";
}

// Puts `index` as `step`'s index, with its checksum.
void PutIndex(rocksdb::DB* db, int64_t step, const SnapshotIndex& index) {
  ASSERT_TRUE(testing::PutSnapshotIndex(db, step, index).ok());
}

// Reads, changes and writes back `step`'s index behind the store's back
// (its checksum made valid again: the damage is in what it says).
void EditIndex(int64_t step, const std::function<void(SnapshotIndex*)>& edit) {
  absl::Status s = testing::EditSnapshotIndex(Dir(), step, edit);
  ASSERT_TRUE(s.ok()) << s;
}

// Leaves `snap` in Dir() as the old format had it (before data files):
// every tensor in chunks of `chunk` bytes under s/<step>/<v>/<tensor>/
// <chunk:06>, the index naming their key prefixes and counts, no data file.
// Written by the store, then moved out of its data file into chunks, so the
// tensors' metadata is the store's own.
void WriteOldFormat(const PsSnapshot& snap, int64_t chunk) {
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write(snap).ok());
  }
  const std::string path = DataFileOf(snap.step);
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  rocksdb::DB* db;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Dir(), &db).ok());
  std::string v;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), absl::StrFormat("i/%020d", snap.step), &v).ok());
  SnapshotIndex index;
  ASSERT_TRUE(index.ParseFromString(v.substr(0, v.size() - 4)));
  auto to_chunks = [&](SnapshotTensor* meta) {
    // "<v>/value" -> "s/<step:020>/<v>/value"
    meta->set_key(absl::StrFormat("s/%020d/%s", snap.step, meta->key()));
    int c = 0;
    for (int64_t off = 0; off < meta->bytes() || c == 0; off += chunk, ++c) {
      const std::string piece = file.substr(meta->offset() + off, std::min(chunk, meta->bytes() - off));
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), absl::StrFormat("%s/%06d", meta->key(), c), piece).ok());
      if (meta->bytes() == 0) break;
    }
    meta->set_chunks(c == 0 ? 1 : c);
    meta->clear_offset();
  };
  for (SnapshotVariable& sv : *index.mutable_variable()) {
    to_chunks(sv.mutable_value());
    for (SnapshotTensor& slot : *sv.mutable_slot()) to_chunks(&slot);
    if (sv.has_ids()) to_chunks(sv.mutable_ids());
  }
  index.clear_data_file();
  index.clear_data_bytes();
  PutIndex(db, snap.step, index);
  delete db;
  ASSERT_EQ(::unlink(path.c_str()), 0);
}

// Overwrites the byte at `offset` of `path` with its complement.
void FlipAByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.read(&c, 1);
  c = static_cast<char>(~c);
  f.seekp(offset);
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << path;
}

// Flips one bit of the first chunk of variable 0's value at `step` in a
// store of the old format.
void FlipABitOfTheOldChunkOf(int64_t step) {
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

// Writes steps 5 and 6, damages step 6 with `damage`, and expects reading
// 6 to be DATA_LOSS with a message containing each of `want` while 5 still
// reads whole.
void ExpectDamageToSixIsDataLoss(const std::function<void()>& damage, const std::vector<std::string>& want) {
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Write(Sample(5, 1.0f)).ok());
    ASSERT_TRUE((*store)->Write(Sample(6, 2.0f)).ok());
  }
  damage();
  for (bool read_only : {true, false}) {
    auto store = read_only ? SnapshotStore::OpenReadOnly(Dir()) : SnapshotStore::Open(Dir());
    ASSERT_TRUE(store.ok()) << store.status();
    auto six = (*store)->Read(6);
    EXPECT_EQ(six.status().code(), absl::StatusCode::kDataLoss) << six.status();
    for (const std::string& w : want) EXPECT_THAT(std::string(six.status().message()), HasSubstr(w));
    auto five = (*store)->Read(5);
    ASSERT_TRUE(five.ok()) << five.status();
    EXPECT_EQ(five->variables[0].value.data<float>()[999], 1.0f);
  }
}

TEST(SnapshotStoreTest, AFlippedByteInATensorIsDataLossNamingFileAndOffset) {
  std::string path;
  ExpectDamageToSixIsDataLoss(
      [&] {
        path = DataFileOf(6);
        FlipAByte(path, 17);  // in variable 0's value, the first tensor
      },
      {"snapshot of step 6", "0/value at offset 0: checksum mismatch"});
  EXPECT_FALSE(path.empty());
}

TEST(SnapshotStoreTest, ATruncatedDataFileIsDataLossNamingFileAndOffset) {
  std::string path;
  ExpectDamageToSixIsDataLoss(
      [&] {
        path = DataFileOf(6);
        ASSERT_EQ(::truncate(path.c_str(), 4000), 0);
      },
      {"snapshot-00000000000000000006-", "(truncated at offset 4000)"});
}

TEST(SnapshotStoreTest, AMissingDataFileIsDataLossNamingIt) {
  std::string path;
  ExpectDamageToSixIsDataLoss(
      [&] {
        path = DataFileOf(6);
        ASSERT_EQ(::unlink(path.c_str()), 0);
      },
      {"snapshot-00000000000000000006-", ".data: missing"});
}

TEST(SnapshotStoreTest, AnIndexPointingPastTheEndIsDataLossNamingFileAndOffset) {
  ExpectDamageToSixIsDataLoss(
      [] { EditIndex(6, [](SnapshotIndex* index) { index->mutable_variable(1)->mutable_value()->set_offset(1 << 20); }); },
      {"snapshot-00000000000000000006-", "1/value at offset 1048576, 16 bytes: past the end of the file"});
}

// Checked before the tensor is allocated: 4 TiB are never asked for.
TEST(SnapshotStoreTest, AnIndexWithAHugeShapeIsDataLoss) {
  ExpectDamageToSixIsDataLoss(
      [] {
        EditIndex(6, [](SnapshotIndex* index) {
          TensorShapeProto* shape = index->mutable_variable(0)->mutable_value()->mutable_shape();
          shape->set_dim(0, 1LL << 40);
        });
      },
      {"0/value: size mismatch"});
}

// An index (its checksum valid) naming a 1 TiB tensor in a sparse data
// file of that size: every size check passes, and the allocation used to
// abort the reader (a PS on Restore, export, the evaluator). Now it is an
// error naming the tensor; nothing else changes.
TEST(SnapshotStoreTest, AnIndexNamingATerabyteTensorInASparseFileIsAnError) {
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE((*store)->Write(Sample(5, 1.0f)).ok());
    ASSERT_TRUE((*store)->Write(Sample(6, 2.0f)).ok());
  }
  const int64_t huge = int64_t{1} << 40;
  const std::string file = DataFileOf(6);
  ASSERT_EQ(::truncate(file.c_str(), huge + 4096), 0);
  EditIndex(6, [&](SnapshotIndex* index) {
    SnapshotTensor* value = index->mutable_variable(0)->mutable_value();
    value->mutable_shape()->set_dim(0, huge / 4);
    value->set_offset(4096);
    value->set_bytes(huge);
    index->mutable_variable(0)->clear_slot();
    index->set_data_bytes(huge + 4096);
  });
  auto store = SnapshotStore::OpenReadOnly(Dir());
  ASSERT_TRUE(store.ok()) << store.status();
  // Refused before the allocation, whatever the kernel's overcommit would
  // have granted: more than this machine's memory.
  auto six = (*store)->Read(6);
  EXPECT_EQ(six.status().code(), absl::StatusCode::kResourceExhausted) << six.status();
  EXPECT_THAT(std::string(six.status().message()), HasSubstr("more than this machine's memory: not read"));
  // A reader's own bound, and its check against the job, come first.
  SnapshotReadOptions bounded;
  bounded.max_bytes = 1 << 30;
  six = (*store)->Read(6, bounded);
  EXPECT_EQ(six.status().code(), absl::StatusCode::kResourceExhausted) << six.status();
  EXPECT_THAT(std::string(six.status().message()), HasSubstr("this reader's bound"));
  SnapshotReadOptions job;
  VariableDef w;
  w.set_name("w");
  w.mutable_shape()->add_dim(1000);
  job.check_variable = [&](const VariableDef& def, DataType dtype, const TensorShape& value) {
    return def.name() == "w" ? FitsVariable(w, def, dtype, value) : absl::OkStatus();
  };
  six = (*store)->Read(6, job);
  EXPECT_EQ(six.status().code(), absl::StatusCode::kFailedPrecondition) << six.status();
  EXPECT_THAT(std::string(six.status().message()),
              HasSubstr("variable w: the checkpoint holds float32[274877906944] (DENSE), the job's variable is "
                        "float32[1000] (DENSE): more rows than the variable has"));
  EXPECT_TRUE((*store)->Read(5, job).ok());
}

// The old format: an index (checksum valid) naming a 1 TiB tensor whose
// chunks hold 4,000 bytes is DATA_LOSS before anything is allocated.
TEST(SnapshotStoreTest, AnOldFormatIndexNamingMoreThanItsChunksIsDataLoss) {
  WriteOldFormat(Sample(5, 1.0f), 1000);
  WriteOldFormat(Sample(6, 2.0f), 1000);
  EditIndex(6, [](SnapshotIndex* index) {
    SnapshotTensor* value = index->mutable_variable(0)->mutable_value();
    value->mutable_shape()->set_dim(0, int64_t{1} << 38);
    value->set_bytes(int64_t{1} << 40);
    value->set_chunks(1 << 20);
    index->mutable_variable(0)->clear_slot();
  });
  auto store = SnapshotStore::OpenReadOnly(Dir());
  ASSERT_TRUE(store.ok()) << store.status();
  auto six = (*store)->Read(6);
  EXPECT_EQ(six.status().code(), absl::StatusCode::kDataLoss) << six.status();
  EXPECT_THAT(std::string(six.status().message()),
              HasSubstr("0/value: its chunks hold 4000 bytes, the index says 1099511627776"));
  EXPECT_TRUE((*store)->Read(5).ok());
}

// A value of another dtype (its size consistent) is DATA_LOSS: readers
// take values as float32 (checkpoints --variable aborted on it).
TEST(SnapshotStoreTest, AnIndexNamingAnotherDtypeIsDataLoss) {
  ExpectDamageToSixIsDataLoss(
      [] { EditIndex(6, [](SnapshotIndex* index) { index->mutable_variable(0)->mutable_value()->set_dtype(DT_INT32); }); },
      {"0/value: int32[1000] as its value (values and slots are float32)"});
}

TEST(SnapshotStoreTest, ASlotOfAnotherShapeIsDataLoss) {
  ExpectDamageToSixIsDataLoss(
      [] {
        EditIndex(6, [](SnapshotIndex* index) {
          SnapshotTensor* slot = index->mutable_variable(0)->mutable_slot(0);
          slot->mutable_shape()->set_dim(0, 500);
          slot->set_bytes(2000);
        });
      },
      {"a slot of [500] for a value of [1000]"});
}

// Tensors overlapping in the file cannot add up to more than it holds.
TEST(SnapshotStoreTest, TensorsAddingUpToMoreThanTheFileAreDataLoss) {
  ExpectDamageToSixIsDataLoss(
      [] {
        EditIndex(6, [](SnapshotIndex* index) {
          for (int i = 0; i < 8; ++i) *index->mutable_variable(0)->add_slot() = index->variable(0).value();
        });
      },
      {"the index names more bytes of tensors than the file's"});
}

TEST(SnapshotStoreTest, AnIndexNamingAFileElsewhereIsDataLoss) {
  ExpectDamageToSixIsDataLoss([] { EditIndex(6, [](SnapshotIndex* index) { index->set_data_file("../ps-1/x.data"); }); },
                              {"names a data file \"../ps-1/x.data\" of no valid shape"});
}

TEST(SnapshotStoreTest, CorruptChunkOfTheOldFormatIsDataLossNamingTheKey) {
  WriteOldFormat(Sample(5, 1.0f), 1 << 20);
  FlipABitOfTheOldChunkOf(5);
  auto store = SnapshotStore::Open(Dir());
  auto snap = (*store)->Read(5);
  EXPECT_EQ(snap.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(snap.status().message()), HasSubstr("0/value: checksum mismatch"));
}

// A store written before data files: its snapshots restore, new ones go
// into data files beside them, and pruning removes the old chunks.
TEST(SnapshotStoreTest, SnapshotsOfTheOldFormatStillRead) {
  WriteOldFormat(Sample(10, 10.0f), 1000);
  WriteOldFormat(Sample(20, 20.0f), 1000);
  auto store = SnapshotStore::Open(Dir());
  ASSERT_TRUE(store.ok()) << store.status();
  auto old = (*store)->Read(20);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->global_step, 40);
  EXPECT_EQ(old->variables[0].value.data<float>()[999], 20.0f);
  EXPECT_EQ(old->variables[0].updates, 7);
  EXPECT_EQ(old->variables[1].ids.data<int64_t>()[1], 1LL << 40);
  ASSERT_TRUE((*store)->Write(Sample(30, 30.0f)).ok());
  EXPECT_EQ(DataFiles().size(), 1u);
  ASSERT_TRUE((*store)->Prune(2, 30).ok());
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{20, 30}));
  ASSERT_TRUE((*store)->Prune(1, 30).ok());
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{30}));
  store->reset();
  rocksdb::DB* db;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Dir(), &db).ok());
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  it->Seek("s/");
  EXPECT_FALSE(it->Valid() && it->key().starts_with("s/")) << "old chunks left: " << it->key().ToString();
  it.reset();
  delete db;
}

// A write killed before its index, a prune killed between index and file,
// a step written again: the files no index names go at the next Open.
TEST(SnapshotStoreTest, DataFilesNoIndexNamesAreRemovedAtOpen) {
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE((*store)->Write(Sample(5, 1.0f)).ok());
  }
  std::ofstream(Dir() + "/snapshot-00000000000000000007-00000000000000ab.data") << "partial";
  std::ofstream(Dir() + "/snapshot-00000000000000000005-00000000000000cd.data") << "replaced";
  std::ofstream(Dir() + "/notes.data") << "not ours";
  ASSERT_EQ(DataFiles().size(), 4u);
  auto store = SnapshotStore::Open(Dir());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(DataFiles().size(), 2u);  // step 5's and notes.data
  EXPECT_TRUE((*store)->Read(5).ok());
  // Written again, a step gets a new file and its old one goes.
  const std::string before = DataFileOf(5);
  ASSERT_TRUE((*store)->Write(Sample(5, 2.0f)).ok());
  EXPECT_NE(DataFileOf(5), before);
  EXPECT_EQ(DataFiles().size(), 2u);
  EXPECT_EQ((*store)->Read(5)->variables[0].value.data<float>()[0], 2.0f);
}

// A damaged block of RocksDB's own files (where the indexes live) ends the
// listing of snapshots early. The sweep at Open once took that short list
// for the truth and deleted the data files of every snapshot it hid; a
// Prune would count the wrong ones as newest. Neither may delete anything.
TEST(SnapshotStoreTest, ADamagedIndexFileDeletesNoDataFile) {
  {
    auto store = SnapshotStore::Open(Dir());
    for (int64_t step : {5, 6, 7}) ASSERT_TRUE((*store)->Write(Sample(step, 1.0f * step)).ok());
  }
  {
    // The indexes into a table file of their own, then a few bytes of its
    // first data block flipped.
    rocksdb::DB* db;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Dir(), &db).ok());
    ASSERT_TRUE(db->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok());
    delete db;
  }
  std::vector<std::string> tables;
  for (const auto& e : std::filesystem::directory_iterator(Dir())) {
    if (e.path().extension() == ".sst") tables.push_back(e.path().string());
  }
  ASSERT_EQ(tables.size(), 1u);
  for (int64_t offset : {12, 13, 40}) FlipAByte(tables[0], offset);
  const std::vector<std::string> before = DataFiles();
  ASSERT_EQ(before.size(), 3u);

  auto store = SnapshotStore::Open(Dir());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(DataFiles(), before) << "the sweep deleted data files";
  auto listed = (*store)->ListSteps();
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.status().code(), absl::StatusCode::kDataLoss) << listed.status();
  EXPECT_THAT(listed.status().message(), HasSubstr("listing the snapshot indexes"));
  absl::Status pruned = (*store)->Prune(1);
  EXPECT_FALSE(pruned.ok());
  EXPECT_EQ(DataFiles(), before) << "the prune deleted data files";
  // Salvage keeps what still reads and moves the damage aside, every data
  // file with it.
  std::string report;
  auto fresh = SnapshotStore::Salvage(*std::move(store), &report);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::string aside = report.substr(report.find("moved to ") + 9);
  int kept_aside = 0;
  for (const std::string& name : before) kept_aside += std::filesystem::exists(aside.substr(0, aside.find(';')) + "/" + name);
  EXPECT_EQ(kept_aside, 3) << report;
}

// An index that does not verify (its checksum) keeps every data file: it
// could name any of them.
TEST(SnapshotStoreTest, AnIndexThatDoesNotVerifyDeletesNoDataFile) {
  {
    auto store = SnapshotStore::Open(Dir());
    for (int64_t step : {5, 6}) ASSERT_TRUE((*store)->Write(Sample(step, 1.0f)).ok());
  }
  {
    rocksdb::DB* db;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), Dir(), &db).ok());
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), absl::StrFormat("i/%020d", 6), &v).ok());
    v[3] = static_cast<char>(~v[3]);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), absl::StrFormat("i/%020d", 6), v).ok());
    delete db;
  }
  std::ofstream(Dir() + "/snapshot-00000000000000000009-00000000000000ab.data") << "an orphan";
  auto store = SnapshotStore::Open(Dir());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(DataFiles().size(), 3u);
  EXPECT_TRUE((*store)->Read(5).ok());
  EXPECT_EQ((*store)->Read(6).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SnapshotStoreTest, LargeTensorsRoundTripThroughDirectWrites) {
  // A pooled (page-aligned, as a PS's snapshot copies are) tensor of
  // several writes and a partial last page, beside small ones: every byte
  // comes back.
  SnapshotStoreOptions o;
  o.chunk_bytes = 1 << 20;
  auto store = SnapshotStore::Open(Dir(), o);
  PsSnapshot s = Sample(1, 1.0f);
  VariableState big;
  big.def.set_name("big");
  const int64_t n = (3 << 18) + 7;
  auto pool = BufferPool::Create({});
  big.value = Tensor(DT_FLOAT, TensorShape({n}), pool->Allocate(n * sizeof(float)));
  float* d = big.value.data<float>();
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(i % 1013);
  s.variables.push_back(big);
  ASSERT_TRUE((*store)->Write(s).ok());
  auto back = (*store)->Read(1);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->variables.size(), 3u);
  const Tensor& t = back->variables[2].value;
  ASSERT_EQ(t.NumElements(), n);
  EXPECT_EQ(std::memcmp(t.raw_data(), big.value.raw_data(), t.TotalBytes()), 0);
  EXPECT_EQ(back->variables[0].value.data<float>()[999], 1.0f);
}

TEST(SnapshotStoreTest, AnInterruptedWriteLeavesNoSnapshot) {
  SnapshotStoreOptions o;
  o.chunk_bytes = 512;
  o.fault_pause_after_chunks = 3;
  SnapshotStore* writing = nullptr;
  std::vector<int64_t> steps_mid_write;
  absl::StatusCode read_mid_write = absl::StatusCode::kOk;
  size_t files_mid_write = 0;
  // Mid-write, where a SIGKILL would land in ps_server_test: the data file
  // is there, the snapshot is not.
  o.on_fault_pause = [&] {
    steps_mid_write = writing->Steps();
    read_mid_write = writing->Read(1).status().code();
    files_mid_write = DataFiles().size();
  };
  auto store = SnapshotStore::Open(Dir(), o);
  writing = store->get();
  ASSERT_TRUE((*store)->Write(Sample(1, 1.0f)).ok());
  EXPECT_EQ(steps_mid_write, std::vector<int64_t>{});
  EXPECT_EQ(read_mid_write, absl::StatusCode::kNotFound);
  EXPECT_EQ(files_mid_write, 1u);
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{1}));
  EXPECT_TRUE((*store)->Read(1).ok());
}

TEST(SnapshotStoreTest, SalvageKeepsWhatVerifiesAndSetsTheDamageAside) {
  {
    auto store = SnapshotStore::Open(Dir());
    ASSERT_TRUE((*store)->Write(Sample(5, 1.0f)).ok());
    ASSERT_TRUE((*store)->Write(Sample(6, 2.0f)).ok());
  }
  FlipAByte(DataFileOf(6), 17);
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
  const std::vector<std::string> files = DataFiles();
  EXPECT_FALSE((*ro)->Write(Sample(6, 1.0f)).ok());
  EXPECT_FALSE((*ro)->Prune(0).ok());
  EXPECT_EQ((*ro)->Steps(), (std::vector<int64_t>{5}));
  EXPECT_EQ(DataFiles(), files);
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

// The chief's retention (SnapshotRequest.retain): exactly the steps it
// names, the step written and the bases of kept deltas stay.
TEST(SnapshotStoreTest, PruneToKeepsTheNamedStepsAndTheirChains) {
  auto store = SnapshotStore::Open(Dir());
  auto write = [&](int64_t step, int64_t base) {
    PsSnapshot snap = Sample(step, 1.0f);
    snap.delta = base >= 0;
    snap.base_step = base;
    ASSERT_TRUE((*store)->Write(snap).ok());
  };
  write(100, -1);
  write(200, 100);
  write(300, -1);
  write(400, 300);
  write(500, 400);
  ASSERT_TRUE((*store)->PruneTo({100}, 500).ok());
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{100, 300, 400, 500}));
  ASSERT_TRUE((*store)->PruneTo({}, 500).ok());
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{300, 400, 500}));
  EXPECT_TRUE((*store)->Read(500).ok());
}

}  // namespace
}  // namespace psrt
