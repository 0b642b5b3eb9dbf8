// Incremental checkpoints through the parameter server's own paths: a chain
// of a full snapshot and deltas of a hash table and a row-partitioned fixed
// table (rows touched in several deltas, rows made
// after the base, rows touched while a delta is being written) restores
// every row and every Adam slot and update count exactly, onto the same
// store and onto another number of PS (restore_assembly re-shards by id);
// compaction every K; a broken chain is refused.
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "common/store/server_core.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kDim = 4;

constexpr int64_t kFixedRows = 50;

// Rows [begin, end) of the fixed table on shard `k` of `n` (n 0: all).
std::pair<int64_t, int64_t> FixedSlice(int k, int n) {
  if (n == 0) return {0, kFixedRows};
  return {k * kFixedRows / n, (k + 1) * kFixedRows / n};
}

// Hash table "h" [any, kDim], shard `k` of `n`; a fixed table "f"
// [kFixedRows, kDim] split by rows the same way; a dense "b". Adam.
CreateVariablesRequest Vars(int k, int n) {
  CreateVariablesRequest r;
  google::protobuf::TextFormat::ParseFromString(R"(
      optimizer { adam { learning_rate: 0.05 } } num_workers: 1
      variable { name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 4 }
                 initializer { kind: GLOROT_UNIFORM } seed: 5 }
      variable { name: "f" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 50 dim: 4 }
                 initializer { kind: GLOROT_UNIFORM } seed: 6 }
      variable { name: "b" dtype: DT_FLOAT shape { dim: 3 } initializer { kind: ONES } })", &r);
  r.mutable_variable(0)->set_hash_shard(n > 1 ? k : 0);
  r.mutable_variable(0)->set_hash_shards(n > 1 ? n : 0);
  if (n > 1) {
    r.mutable_variable(1)->set_row_begin(FixedSlice(k, n).first);
    r.mutable_variable(1)->set_row_end(FixedSlice(k, n).second);
  }
  return r;
}

std::string Bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes()); }

// Every id's value row and both slot rows.
std::map<int64_t, std::string> RowsById(const VariableState& v) {
  std::map<int64_t, std::string> out;
  const int64_t n = v.ids.NumElements();
  const size_t row = kDim * sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    std::string r = Bytes(v.value).substr(i * row, row);
    for (const Tensor& t : v.slots) r += Bytes(t).substr(i * row, row);
    EXPECT_TRUE(out.emplace(v.ids.data<int64_t>()[i], r).second) << "id twice: " << v.ids.data<int64_t>()[i];
  }
  return out;
}

const VariableState* Find(const PsSnapshot& s, const std::string& name) {
  for (const VariableState& v : s.variables) {
    if (v.def.name() == name) return &v;
  }
  ADD_FAILURE() << "no " << name;
  return nullptr;
}

// The fixed table's value and slot bytes, and its update count.
std::string FixedRows(const PsSnapshot& s) {
  const VariableState* f = Find(s, "f");
  if (f == nullptr) return "";
  std::string out = absl::StrCat(f->updates, ":", Bytes(f->value));
  for (const Tensor& t : f->slots) out += Bytes(t);
  return out;
}

class IncrementalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/inc_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(std::system(absl::StrCat("rm -rf ", dir_).c_str()), 0);
  }
  std::unique_ptr<ParameterServerCore> Core(const std::string& name, int k, int n) {
    ServerCoreOptions o;
    o.snapshot_root = dir_;
    o.store_name = name;
    auto core = std::make_unique<ParameterServerCore>(o);
    EXPECT_TRUE(core->CreateVariables(Vars(k, n)).ok());
    return core;
  }
  // One Adam step of rows for the ids of `ids` this shard holds, and of b.
  void Push(ParameterServerCore* core, const std::vector<int64_t>& ids, int k, int n) {
    // The hash ids this shard holds, and rows of f picked by them.
    std::vector<int64_t> mine;
    std::set<int64_t> fixed;
    const auto [begin, end] = FixedSlice(k, n);
    for (int64_t id : ids) {
      if (HashShardOf(id, n) == k) mine.push_back(id);
      const int64_t row = ((id % kFixedRows) + kFixedRows) % kFixedRows;
      if (row >= begin && row < end) fixed.insert(row);
    }
    auto update = [this](const std::string& name, std::vector<int64_t> rows) {
      const int64_t m = static_cast<int64_t>(rows.size());
      Tensor g(DT_FLOAT, TensorShape({m, kDim}));
      for (int64_t i = 0; i < g.NumElements(); ++i) g.data<float>()[i] = 0.01f * ((i * 7 + step_) % 13 - 6);
      return SparseUpdate{name, Tensor::FromVector<int64_t>(rows, TensorShape({m})), g};
    };
    RequestId id;
    id.set_worker(0);
    id.set_worker_incarnation(1);
    id.set_step(step_++);
    ASSERT_TRUE(core->PushRows(id, {update("h", mine), update("f", {fixed.begin(), fixed.end()})}).ok());
    id.set_step(step_++);
    ASSERT_TRUE(core->Push(id, {{"b", Tensor::FromVector<float>({0.1f, -0.2f, 0.3f}, TensorShape({3}))}}).ok());
  }
  static absl::StatusOr<SnapshotResponse> Snap(ParameterServerCore* core, int64_t step, const std::string& ckpt,
                                               int full_every, bool wait = true) {
    SnapshotRequest r;
    r.set_step(step);
    r.set_checkpoint(ckpt);
    r.set_wait_durable(wait);
    r.set_keep(2);
    r.set_full_every(full_every);
    return core->Snapshot(r);
  }
  PsSnapshot Read(const std::string& ckpt, const std::string& name, int64_t step) {
    auto store = SnapshotStore::OpenReadOnly(absl::StrCat(dir_, "/", ckpt, "/", name));
    EXPECT_TRUE(store.ok()) << store.status();
    auto snap = (*store)->Read(step);
    EXPECT_TRUE(snap.ok()) << snap.status();
    return snap.ok() ? *snap : PsSnapshot();
  }
  // The core's whole state now, through a full snapshot into `ckpt`.
  PsSnapshot State(ParameterServerCore* core, const std::string& name, const std::string& ckpt, int64_t step) {
    auto r = Snap(core, step, ckpt, 0);
    EXPECT_TRUE(r.ok()) << r.status();
    return Read(ckpt, name, step);
  }
  static std::vector<int64_t> Ids(int64_t from, int64_t to, int64_t every = 1) {
    std::vector<int64_t> out;
    for (int64_t id = from; id < to; id += every) out.push_back(id * 7919 - 300000);  // negative ids too
    return out;
  }
  static void ExpectSame(const PsSnapshot& got, const PsSnapshot& want, const std::string& what) {
    ASSERT_NE(Find(got, "h"), nullptr);
    ASSERT_NE(Find(want, "h"), nullptr);
    EXPECT_EQ(RowsById(*Find(got, "h")), RowsById(*Find(want, "h"))) << what;
    EXPECT_EQ(Find(got, "h")->updates, Find(want, "h")->updates) << what;
    EXPECT_EQ(Bytes(Find(got, "b")->value), Bytes(Find(want, "b")->value)) << what;
    EXPECT_EQ(FixedRows(got), FixedRows(want)) << what;
    EXPECT_EQ(Bytes(Find(got, "b")->slots[1]), Bytes(Find(want, "b")->slots[1])) << what;
  }
  std::string dir_;
  int64_t step_ = 0;
};

TEST_F(IncrementalTest, ChainRestoresEveryRowAndSlotOnTheSameAndOtherPsCounts) {
  std::vector<std::unique_ptr<ParameterServerCore>> two;
  for (int k = 0; k < 2; ++k) two.push_back(Core(absl::StrCat("ps-", k), k, 2));
  auto push_all = [&](const std::vector<int64_t>& ids) {
    for (int k = 0; k < 2; ++k) Push(two[k].get(), ids, k, 2);
  };
  push_all(Ids(0, 400));
  std::vector<int64_t> full_bytes(2);
  for (int k = 0; k < 2; ++k) {
    auto r = Snap(two[k].get(), 10, "ckpt", 5);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->delta());
    full_bytes[k] = r->bytes();
  }
  // Delta 1: some old rows, and rows made after the base.
  push_all(Ids(0, 400, 10));
  push_all(Ids(400, 420));
  int64_t delta_bytes = 0;
  for (int k = 0; k < 2; ++k) {
    auto r = Snap(two[k].get(), 20, "ckpt", 5);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->delta());
    EXPECT_EQ(r->base_step(), 10);
    delta_bytes += r->bytes();
  }
  EXPECT_LT(delta_bytes, (full_bytes[0] + full_bytes[1]) / 4) << "a delta of 60 of 420 rows";
  // Delta 2, not waited for: rows touched again (some in delta 1 too) and
  // new ones; then rows touched while it is being written, which the next
  // delta must hold.
  push_all(Ids(0, 400, 20));
  push_all(Ids(420, 430));
  for (int k = 0; k < 2; ++k) ASSERT_TRUE(Snap(two[k].get(), 30, "ckpt", 5, /*wait=*/false).ok());
  push_all(Ids(5, 400, 50));
  push_all(Ids(430, 435));
  for (int k = 0; k < 2; ++k) {
    auto r = Snap(two[k].get(), 40, "ckpt", 5);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->delta());
    EXPECT_EQ(r->base_step(), 30);
  }
  std::vector<PsSnapshot> want;
  for (int k = 0; k < 2; ++k) want.push_back(State(two[k].get(), absl::StrCat("ps-", k), "ref", 41));
  ASSERT_EQ(Find(want[0], "h")->ids.NumElements() + Find(want[1], "h")->ids.NumElements(), 435);

  // The chain read back whole equals the state.
  for (int k = 0; k < 2; ++k) ExpectSame(Read("ckpt", absl::StrCat("ps-", k), 40), want[k], absl::StrCat("ps-", k));

  // Onto the same stores (the chief's restore of a store's own snapshot),
  // after more training that the restore must undo.
  push_all(Ids(0, 435, 3));
  RestoreRequest same;
  same.set_step(40);
  same.set_checkpoint("ckpt");
  same.set_generation(3);
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(two[k]->Restore(same).ok());
    ExpectSame(State(two[k].get(), absl::StrCat("ps-", k), "after", 42), want[k], absl::StrCat("restored ps-", k));
    // A restored state is no delta's base: the next snapshot is full.
    auto r = Snap(two[k].get(), 50, "ckpt", 5);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->delta());
  }

  // Onto three PS and one: every id on the shard that owns it, exactly.
  std::map<int64_t, std::string> want_rows;
  std::string want_fixed;
  for (const PsSnapshot& w : want) {
    for (auto& [id, row] : RowsById(*Find(w, "h"))) want_rows.emplace(id, row);
    want_fixed += Bytes(Find(w, "f")->value);
  }
  ASSERT_EQ(want_fixed.size(), kFixedRows * kDim * sizeof(float));
  for (int n : {3, 1}) {
    std::map<int64_t, std::string> got;
    std::string got_fixed;
    for (int k = 0; k < n; ++k) {
      const std::string name = absl::StrCat("ps-of-", n, "-", k);
      auto shard = Core(name, k, n);
      RestoreRequest other;
      other.set_step(40);
      other.set_checkpoint("ckpt");
      other.add_source("ps-0");
      other.add_source("ps-1");
      ASSERT_TRUE(shard->Restore(other).ok());
      const PsSnapshot snap = State(shard.get(), name, "after", 43);
      EXPECT_EQ(Find(snap, "h")->updates, Find(want[0], "h")->updates);
      got_fixed += Bytes(Find(snap, "f")->value);
      for (auto& [id, row] : RowsById(*Find(snap, "h"))) {
        EXPECT_EQ(HashShardOf(id, n), k);
        EXPECT_TRUE(got.emplace(id, row).second);
      }
    }
    EXPECT_EQ(got, want_rows) << "onto " << n;
    EXPECT_EQ(got_fixed, want_fixed) << "onto " << n;
  }
}

TEST_F(IncrementalTest, FullEveryKDeltasAndPruningKeepsTheChain) {
  auto ps = Core("ps-0", 0, 0);
  std::vector<bool> kinds;
  for (int64_t step = 1; step <= 7; ++step) {
    Push(ps.get(), Ids(step * 10, step * 10 + 5), 0, 0);
    auto r = Snap(ps.get(), step, "ckpt", 2);
    ASSERT_TRUE(r.ok()) << r.status();
    kinds.push_back(r->delta());
    if (r->delta()) {
      EXPECT_EQ(r->base_step(), step - 1);
    }
  }
  // Full, two deltas, full, two deltas, full.
  EXPECT_EQ(kinds, (std::vector<bool>{false, true, true, false, true, true, false}));
  auto store = SnapshotStore::OpenReadOnly(dir_ + "/ckpt/ps-0");
  ASSERT_TRUE(store.ok());
  // keep 2: steps 6 and 7; 7 is full, 6 a delta needing 5 and 4.
  EXPECT_EQ((*store)->Steps(), (std::vector<int64_t>{4, 5, 6, 7}));
  store->reset();
  // Another checkpoint name, or another variable list, starts full.
  auto r = Snap(ps.get(), 8, "other", 2);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->delta());
  EXPECT_EQ(Snap(ps.get(), 9, "other", 1001).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(IncrementalTest, BrokenChainIsRefusedAndChangesNothing) {
  {
    auto ps = Core("ps-0", 0, 0);
    Push(ps.get(), Ids(0, 50), 0, 0);
    ASSERT_TRUE(Snap(ps.get(), 1, "ckpt", 4).ok());
    Push(ps.get(), Ids(0, 10), 0, 0);
    ASSERT_TRUE(Snap(ps.get(), 2, "ckpt", 4).ok());
  }
  // The base's data file lost.
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/ckpt/ps-0")) {
    if (e.path().filename().string().rfind("snapshot-00000000000000000001-", 0) == 0) std::filesystem::remove(e.path());
  }
  auto fresh = Core("ps-1", 0, 0);
  PsSnapshot before = State(fresh.get(), "ps-1", "before", 1);
  RestoreRequest r;
  r.set_step(2);
  r.set_checkpoint("ckpt");
  r.add_source("ps-0");
  auto s = fresh->Restore(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("ps-0: "));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("missing"));
  ExpectSame(State(fresh.get(), "ps-1", "before", 2), before, "after a refused restore");
}

}  // namespace
}  // namespace psrt
