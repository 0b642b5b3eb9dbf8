// Restores across layouts: a checkpoint of two PS shards (one variable
// partitioned by rows) restored into one full replica and back, through
// real stores on disk; and the assembly's refusals.
#include "common/store/restore_assembly.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "common/store/server_core.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

VariableDef Def(const std::string& text) {
  VariableDef d;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &d)) << text;
  return d;
}

// "w": float [5, 2], "b": float [2]; `w_rows` is the slice this store holds.
CreateVariablesRequest Vars(int64_t w_begin, int64_t w_end, bool with_b) {
  CreateVariablesRequest r;
  google::protobuf::TextFormat::ParseFromString(R"(
      optimizer { adam { learning_rate: 0.1 } } num_workers: 1)", &r);
  VariableDef* w = r.add_variable();
  *w = Def(R"(name: "w" dtype: DT_FLOAT shape { dim: 5 dim: 2 } initializer { kind: GLOROT_UNIFORM })");
  w->set_row_begin(w_begin);
  w->set_row_end(w_end);
  if (with_b) *r.add_variable() = Def(R"(name: "b" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ONES })");
  return r;
}

class CrossLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/cross_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(std::system(absl::StrCat("rm -rf ", dir_).c_str()), 0);
  }
  std::unique_ptr<ParameterServerCore> Store(const std::string& name, const CreateVariablesRequest& vars) {
    ServerCoreOptions o;
    o.snapshot_root = dir_;
    o.store_name = name;
    auto core = std::make_unique<ParameterServerCore>(o);
    EXPECT_TRUE(core->CreateVariables(vars).ok());
    return core;
  }
  // A few Adam steps, so values and both slots differ from their initial ones.
  static void Train(ParameterServerCore* core, const std::map<std::string, TensorShape>& shapes) {
    for (int64_t s = 0; s < 3; ++s) {
      NamedTensors grads;
      for (const auto& [name, shape] : shapes) {
        Tensor g(DT_FLOAT, shape);
        for (int64_t i = 0; i < g.NumElements(); ++i) g.data<float>()[i] = 0.1f * (i + 1) * (s + 1);
        grads.emplace_back(name, g);
      }
      RequestId id;
      id.set_worker(0);
      id.set_worker_incarnation(1);
      id.set_step(s);
      ASSERT_TRUE(core->Push(id, grads).ok());
    }
  }
  static void Snap(ParameterServerCore* core, int64_t step) {
    SnapshotRequest r;
    r.set_step(step);
    r.set_checkpoint("ckpt");
    r.set_wait_durable(true);
    ASSERT_TRUE(core->Snapshot(r).ok());
  }
  static absl::Status Restore(ParameterServerCore* core, int64_t step, std::vector<std::string> sources) {
    RestoreRequest r;
    r.set_step(step);
    r.set_checkpoint("ckpt");
    r.set_generation(9);
    for (const std::string& s : sources) r.add_source(s);
    return core->Restore(r).status();
  }
  // The state a store would snapshot, read back through a snapshot of its own.
  PsSnapshot State(ParameterServerCore* core, const std::string& name, int64_t step) {
    Snap(core, step);
    auto store = SnapshotStore::OpenReadOnly(absl::StrCat(dir_, "/ckpt/", name));
    EXPECT_TRUE(store.ok()) << store.status();
    auto snap = (*store)->Read(step);
    EXPECT_TRUE(snap.ok()) << snap.status();
    return *snap;
  }
  std::string dir_;
};

std::string Bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes()); }

const VariableState& Find(const PsSnapshot& s, const std::string& name) {
  for (const VariableState& v : s.variables) {
    if (v.def.name() == name) return v;
  }
  ADD_FAILURE() << "no " << name;
  return s.variables[0];
}

TEST_F(CrossLayoutTest, TwoPsShardsRestoreIntoAReplicaAndBackBitIdentical) {
  // Two PS: ps-0 holds w rows [0, 3) and b, ps-1 rows [3, 5).
  auto ps0 = Store("ps-0", Vars(0, 3, true));
  auto ps1 = Store("ps-1", Vars(3, 5, false));
  Train(ps0.get(), {{"w", TensorShape({3, 2})}, {"b", TensorShape({2})}});
  Train(ps1.get(), {{"w", TensorShape({2, 2})}});
  Snap(ps0.get(), 100);
  Snap(ps1.get(), 100);
  PsSnapshot s0 = State(ps0.get(), "ps-0", 101), s1 = State(ps1.get(), "ps-1", 101);

  // Into a full replica (a mirrored worker's store).
  auto replica = Store("worker-0", Vars(0, 0, true));
  ASSERT_TRUE(Restore(replica.get(), 100, {"ps-0", "ps-1"}).ok());
  PsSnapshot r = State(replica.get(), "worker-0", 102);
  const VariableState& w = Find(r, "w");
  const VariableState& w0 = Find(s0, "w");
  const VariableState& w1 = Find(s1, "w");
  EXPECT_EQ(Bytes(w.value), Bytes(w0.value) + Bytes(w1.value));
  ASSERT_EQ(w.slots.size(), 2u);  // Adam: m and v
  for (int k = 0; k < 2; ++k) EXPECT_EQ(Bytes(w.slots[k]), Bytes(w0.slots[k]) + Bytes(w1.slots[k])) << k;
  EXPECT_EQ(w.updates, 3);
  EXPECT_EQ(Bytes(Find(r, "b").value), Bytes(Find(s0, "b").value));
  EXPECT_EQ(replica->Status().generation(), 9);

  // And back onto three shards of another split (w rows [0,2), [2,4), [4,5)).
  std::vector<std::pair<int64_t, int64_t>> split = {{0, 2}, {2, 4}, {4, 5}};
  std::string whole_w = Bytes(w.value);
  for (int i = 0; i < 3; ++i) {
    auto shard = Store(absl::StrCat("ps-new-", i), Vars(split[i].first, split[i].second, i == 0));
    ASSERT_TRUE(Restore(shard.get(), 102, {"worker-0"}).ok());
    PsSnapshot back = State(shard.get(), absl::StrCat("ps-new-", i), 103);
    EXPECT_EQ(Bytes(Find(back, "w").value), whole_w.substr(split[i].first * 8, (split[i].second - split[i].first) * 8))
        << "shard " << i;
  }
}

TEST_F(CrossLayoutTest, RefusalsNameTheVariableAndChangeNothing) {
  auto ps0 = Store("ps-0", Vars(0, 3, true));
  Snap(ps0.get(), 5);
  auto replica = Store("worker-0", Vars(0, 0, true));
  PsSnapshot before = State(replica.get(), "worker-0", 6);
  // ps-1's rows are missing.
  absl::Status s = Restore(replica.get(), 5, {"ps-0"});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("lacks 2 rows of w (first: row 3)"));
  // Names, not paths; a store that does not exist.
  EXPECT_EQ(Restore(replica.get(), 5, {"../ps-0"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Restore(replica.get(), 5, {"ps-9"}).ok());
  PsSnapshot after = State(replica.get(), "worker-0", 7);
  EXPECT_EQ(Bytes(Find(after, "w").value), Bytes(Find(before, "w").value));
  EXPECT_NE(replica->Status().generation(), 9);
}

// A mirrored replica writes only its share of a checkpoint; two shares
// restore a replica whole.
TEST_F(CrossLayoutTest, ReplicasWriteSharesThatRestoreWhole) {
  auto a = Store("worker-0", Vars(0, 0, true));
  auto b = Store("worker-1", Vars(0, 0, true));
  Train(a.get(), {{"w", TensorShape({5, 2})}, {"b", TensorShape({2})}});
  Train(b.get(), {{"w", TensorShape({5, 2})}, {"b", TensorShape({2})}});
  auto share = [](ParameterServerCore* core, std::vector<std::string> vars) {
    SnapshotRequest r;
    r.set_step(50);
    r.set_checkpoint("ckpt");
    r.set_wait_durable(true);
    for (const std::string& v : vars) r.add_variable(v);
    return core->Snapshot(r);
  };
  EXPECT_EQ(share(a.get(), {"w", "w"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(share(a.get(), {"nope"}).ok());
  ASSERT_TRUE(share(a.get(), {"w"}).ok());
  ASSERT_TRUE(share(b.get(), {"b"}).ok());
  auto only_w = SnapshotStore::OpenReadOnly(dir_ + "/ckpt/worker-0");
  ASSERT_TRUE(only_w.ok());
  auto snap = (*only_w)->Read(50);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->variables.size(), 1u);
  EXPECT_EQ(snap->variables[0].def.name(), "w");
  only_w->reset();
  PsSnapshot want = State(a.get(), "worker-0", 51);
  auto fresh = Store("worker-2", Vars(0, 0, true));
  ASSERT_TRUE(Restore(fresh.get(), 50, {"worker-0", "worker-1"}).ok());
  PsSnapshot got = State(fresh.get(), "worker-2", 52);
  for (const char* v : {"w", "b"}) {
    EXPECT_EQ(Bytes(Find(got, v).value), Bytes(Find(want, v).value)) << v;
    EXPECT_EQ(Bytes(Find(got, v).slots[1]), Bytes(Find(want, v).slots[1])) << v;
  }
}

// Hash table "h" [any, 3], shard `k` of `n`, trained with Adam.
CreateVariablesRequest HashVars(int k, int n) {
  CreateVariablesRequest r;
  google::protobuf::TextFormat::ParseFromString(R"(
      optimizer { adam { learning_rate: 0.1 } } num_workers: 1
      variable { name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 3 }
                 initializer { kind: GLOROT_UNIFORM } seed: 11 })", &r);
  r.mutable_variable(0)->set_hash_shard(n > 1 ? k : 0);
  r.mutable_variable(0)->set_hash_shards(n > 1 ? n : 0);
  return r;
}

// Every id's value row and slot rows, from a store's own snapshot.
std::map<int64_t, std::string> RowsById(const VariableState& v) {
  std::map<int64_t, std::string> out;
  const int64_t n = v.ids.NumElements();
  const size_t row = v.value.TotalBytes() / std::max<int64_t>(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    std::string r = Bytes(v.value).substr(i * row, row);
    for (const Tensor& t : v.slots) r += Bytes(t).substr(i * row, row);
    EXPECT_TRUE(out.emplace(v.ids.data<int64_t>()[i], r).second) << "id twice: " << v.ids.data<int64_t>()[i];
  }
  return out;
}

TEST_F(CrossLayoutTest, HashTableReShardsByIdOntoThreeAndOneBitIdentical) {
  // Two shards as workers route them (negative ids included), a few Adam
  // steps of rows on each.
  std::vector<std::unique_ptr<ParameterServerCore>> two;
  for (int k = 0; k < 2; ++k) two.push_back(Store(absl::StrCat("ps-", k), HashVars(k, 2)));
  std::vector<int64_t> all_ids;
  for (int64_t id = -7; id < 40; id += 3) all_ids.push_back(id * 1000003);
  for (int64_t s = 0; s < 3; ++s) {
    for (int k = 0; k < 2; ++k) {
      std::vector<int64_t> mine;
      for (int64_t id : all_ids) {
        if (HashShardOf(id, 2) == k && (id + s) % 2 != 0) mine.push_back(id);
      }
      if (s == 0) {  // every id touched once at least
        mine.clear();
        for (int64_t id : all_ids) {
          if (HashShardOf(id, 2) == k) mine.push_back(id);
        }
      }
      const int64_t m = static_cast<int64_t>(mine.size());
      Tensor g(DT_FLOAT, TensorShape({m, 3}));
      for (int64_t i = 0; i < g.NumElements(); ++i) g.data<float>()[i] = 0.01f * (i + 1) * (s + 2);
      RequestId id;
      id.set_worker(0);
      id.set_worker_incarnation(1);
      id.set_step(s);
      ASSERT_TRUE(two[k]->PushRows(id, {{"h", Tensor::FromVector<int64_t>(mine, TensorShape({m})), g}}).ok());
    }
  }
  for (auto& ps : two) Snap(ps.get(), 200);
  std::map<int64_t, std::string> want;
  for (int k = 0; k < 2; ++k) {
    for (auto& [id, row] : RowsById(Find(State(two[k].get(), absl::StrCat("ps-", k), 201), "h"))) {
      want.emplace(id, row);
    }
  }
  ASSERT_EQ(want.size(), all_ids.size());

  for (int n : {3, 1}) {
    std::map<int64_t, std::string> got;
    for (int k = 0; k < n; ++k) {
      const std::string name = absl::StrCat("ps-of-", n, "-", k);
      auto shard = Store(name, HashVars(k, n));
      ASSERT_TRUE(Restore(shard.get(), 200, {"ps-0", "ps-1"}).ok());
      const PsSnapshot snap = State(shard.get(), name, 202);
      const VariableState& h = Find(snap, "h");
      EXPECT_EQ(h.updates, 3);
      for (auto& [id, row] : RowsById(h)) {
        EXPECT_EQ(HashShardOf(id, n), k) << "id " << id << " on shard " << k << " of " << n;
        EXPECT_TRUE(got.emplace(id, row).second) << "id " << id << " restored twice";
      }
    }
    EXPECT_EQ(got, want) << "onto " << n;
  }
}

TEST_F(CrossLayoutTest, HashShardsAreCheckedAtTheEdge) {
  ServerCoreOptions o;
  o.snapshot_root = dir_;
  o.store_name = "ps-0";
  ParameterServerCore core(o);
  CreateVariablesRequest bad = HashVars(3, 3);
  auto s = core.CreateVariables(bad);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("hash shard 3 of 3"));
  bad = HashVars(0, 2);
  bad.mutable_variable(0)->set_kind(VariableDef::DENSE);
  bad.mutable_variable(0)->mutable_shape()->set_dim(0, 4);
  EXPECT_EQ(core.CreateVariables(bad).status().code(), absl::StatusCode::kInvalidArgument);
  // Created as shard 0 of 2: shard 1 of 2 is another variable.
  ASSERT_TRUE(core.CreateVariables(HashVars(0, 2)).ok());
  EXPECT_EQ(core.CreateVariables(HashVars(1, 2)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AssembleVariablesTest, RefusesOtherOptimizersShapesAndMissingTables) {
  PsSnapshot snap;
  VariableState st;
  st.def = Def(R"(name: "w" dtype: DT_FLOAT shape { dim: 2 })");
  st.value = Tensor::Zeros(DT_FLOAT, TensorShape({2}));
  st.slots = {Tensor::Zeros(DT_FLOAT, TensorShape({2}))};
  snap.variables.push_back(st);
  auto other_optimizer = AssembleVariables({st.def}, 2, {snap});
  EXPECT_EQ(other_optimizer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(other_optimizer.status().message()), HasSubstr("1 optimizer slots"));
  auto other_shape = AssembleVariables({Def(R"(name: "w" dtype: DT_FLOAT shape { dim: 3 })")}, 1, {snap});
  EXPECT_EQ(other_shape.status().code(), absl::StatusCode::kFailedPrecondition);
  auto table = AssembleVariables({Def(R"(name: "t" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 })")}, 1, {snap});
  EXPECT_EQ(table.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(table.status().message()), HasSubstr("lacks hash table t"));
  // A dense piece under a hash table's name: another model.
  auto as_table = AssembleVariables({Def(R"(name: "w" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 })")},
                                    1, {snap});
  EXPECT_EQ(as_table.status().code(), absl::StatusCode::kFailedPrecondition);
  // A variable no piece has at all: the checkpoint is another model's.
  auto absent = AssembleVariables({Def(R"(name: "v" dtype: DT_FLOAT shape { dim: 2 })")}, 1, {snap});
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(absent.status().message()), HasSubstr("the checkpoint has no variable v (another model"));
  auto ok = AssembleVariables({st.def}, 1, {snap});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].value.shape(), TensorShape({2}));
}

}  // namespace
}  // namespace psrt
