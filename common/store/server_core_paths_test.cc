// ParameterServerCore paths beyond server_core_test.cc: every optimizer of
// the shared library applied through the server (dense and lazy rows),
// torn reads under concurrent pushes, initializers that agree across
// servers and slices, row-range and size limits, keep-K pruning, corrupt
// snapshots, and reuse of pulled tensors' storage.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "common/store/server_core.h"

namespace psrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

CreateVariablesRequest Req(const std::string& text) {
  CreateVariablesRequest r;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &r)) << text;
  if (r.num_workers() == 0) r.set_num_workers(1);
  return r;
}

RequestId Id(int worker, int64_t step) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(1);
  id.set_step(step);
  return id;
}

Tensor Fill(TensorShape shape, float v) {
  Tensor t(DT_FLOAT, std::move(shape));
  t.flat<float>().setConstant(v);
  return t;
}

Tensor Ids(std::vector<int64_t> ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  return Tensor::FromVector<int64_t>(ids, TensorShape({n}));
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.NumElements());
}

// Synchronous forms of the callback pulls; the worker -1 (chief) never waits.
absl::StatusOr<NamedTensors> Pull(ParameterServerCore* ps, std::vector<std::string> names) {
  absl::Notification done;
  absl::StatusOr<NamedTensors> out;
  ps->Pull(std::move(names), -1, 0, absl::Now() + absl::Seconds(10),
           [&](absl::Status s, NamedTensors t, int64_t) {
             if (s.ok()) out = std::move(t); else out = s;
             done.Notify();
           });
  done.WaitForNotification();
  return out;
}

absl::StatusOr<Tensor> PullRows(ParameterServerCore* ps, const std::string& name, Tensor ids) {
  absl::Notification done;
  absl::StatusOr<Tensor> out;
  ps->PullRows({{name, std::move(ids)}}, -1, 0, absl::Now() + absl::Seconds(10),
               [&](absl::Status s, NamedTensors t, int64_t) {
                 if (s.ok()) out = std::move(t[0].second); else out = s;
                 done.Notify();
               });
  done.WaitForNotification();
  return out;
}

std::vector<float> PullOne(ParameterServerCore* ps, const std::string& name) {
  auto r = Pull(ps, {name});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? Values((*r)[0].second) : std::vector<float>{};
}

ServerCoreOptions Options() {
  ServerCoreOptions o;
  o.incarnation = 7;
  return o;
}

TEST(ServerCorePathsTest, EveryOptimizerMatchesTheSharedLibraryDenseAndLazyRows) {
  for (const std::string opt_text : {
           "sgd { learning_rate: 0.1 }",
           "momentum { learning_rate: 0.1 momentum: 0.9 }",
           "momentum { learning_rate: 0.1 momentum: 0.9 nesterov: true }",
           "adagrad { learning_rate: 0.1 }",
           "adam { learning_rate: 0.01 }",
           "ftrl { learning_rate: 0.1 l1: 0.01 l2: 0.01 }",
           "adamw { learning_rate: 0.01 weight_decay: 0.1 }",
           "rmsprop { learning_rate: 0.01 }",
           "rmsprop { learning_rate: 0.01 momentum: 0.9 centered: true }",
       }) {
    SCOPED_TRACE(opt_text);
    ParameterServerCore ps(Options());
    CreateVariablesRequest req = Req(absl::StrCat(R"(
        variable { name: "d" dtype: DT_FLOAT shape { dim: 4 } initializer { kind: CONSTANT value: 0.5 } }
        variable { name: "t" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 3 dim: 2 }
                   initializer { kind: CONSTANT value: 0.5 } }
        optimizer { )", opt_text, " }"));
    ASSERT_TRUE(ps.CreateVariables(req).ok());
    auto opt = *Optimizer::Create(req.optimizer());
    std::vector<float> d(4, 0.5f), row1(2, 0.5f);
    std::vector<std::vector<float>> d_slots(opt->num_slots()), r_slots(opt->num_slots());
    for (int s = 0; s < opt->num_slots(); ++s) {
      d_slots[s].assign(4, opt->slot_initial_value(s));
      r_slots[s].assign(2, opt->slot_initial_value(s));
    }
    const std::vector<float> g = {0.1f, -0.2f, 0.3f, -0.4f};
    const std::vector<float> rg = {0.3f, -0.1f};
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(ps.Push(Id(0, step), {{"d", Tensor::FromVector<float>(g, TensorShape({4}))}}).ok());
      ASSERT_TRUE(ps.PushRows(Id(1, step), {{"t", Ids({1}), Tensor::FromVector<float>(rg, TensorShape({1, 2}))}}).ok());
      std::vector<float*> ds, rs;
      for (auto& s : d_slots) ds.push_back(s.data());
      for (auto& s : r_slots) rs.push_back(s.data());
      opt->Apply(d.data(), g.data(), 4, ds.data(), step + 1);
      opt->Apply(row1.data(), rg.data(), 2, rs.data(), step + 1);
    }
    std::vector<float> got = PullOne(&ps, "d");
    ASSERT_EQ(got.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], d[i]) << i;
    EXPECT_NE(got[0], 0.5f);
    auto rows = PullRows(&ps, "t", Ids({0, 1, 2}));
    ASSERT_TRUE(rows.ok()) << rows.status();
    std::vector<float> t = Values(*rows);
    EXPECT_FLOAT_EQ(t[2], row1[0]);
    EXPECT_FLOAT_EQ(t[3], row1[1]);
    EXPECT_EQ(t[0], 0.5f);  // lazy: rows 0 and 2 and their slots untouched
    EXPECT_EQ(t[5], 0.5f);
  }
}

// AdamW's and RMSprop's slots (and the update count their bias correction
// and schedule read) are part of a snapshot: a fresh server restored from
// step 2 and given steps 2 and 3 ends bit-identical to the one that never
// stopped, dense variables and table rows alike.
TEST(ServerCorePathsTest, AdamWAndRmspropSlotsSurviveASnapshotAndRestore) {
  ServerCoreOptions o = Options();
  o.snapshot_root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/slot_snapshots");
  int run = 0;
  for (const std::string opt_text : {
           "adamw { learning_rate: 0.01 weight_decay: 0.1 } schedule { kind: STEP decay_steps: 3 decay_rate: 0.5 }",
           "rmsprop { learning_rate: 0.01 momentum: 0.9 centered: true }",
       }) {
    SCOPED_TRACE(opt_text);
    const std::string dir = absl::StrCat("slots_", run++);
    const CreateVariablesRequest req = Req(absl::StrCat(R"(
        variable { name: "d" dtype: DT_FLOAT shape { dim: 4 } initializer { kind: CONSTANT value: 0.5 } }
        variable { name: "t" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 3 dim: 2 }
                   initializer { kind: CONSTANT value: 0.5 } }
        optimizer { )", opt_text, " }"));
    auto push = [](ParameterServerCore* ps, int step) {
      const float s = 1.0f + step;
      ASSERT_TRUE(ps->Push(Id(0, step), {{"d", Tensor::FromVector<float>({0.1f * s, -0.2f, 0.3f / s, -0.4f * s},
                                                                          TensorShape({4}))}}).ok());
      ASSERT_TRUE(ps->PushRows(Id(0, step), {{"t", Ids({step % 3}), Tensor::FromVector<float>(
                                                                      {0.3f * s, -0.1f}, TensorShape({1, 2}))}}).ok());
    };
    std::vector<float> want_d, want_t;
    {
      ParameterServerCore first(o);
      ASSERT_TRUE(first.CreateVariables(req).ok());
      push(&first, 0);
      push(&first, 1);
      SnapshotRequest snap;
      snap.set_step(2);
      snap.set_checkpoint(dir);
      snap.set_wait_durable(true);
      ASSERT_TRUE(first.Snapshot(snap).ok());
      push(&first, 2);
      push(&first, 3);
      want_d = PullOne(&first, "d");
      want_t = Values(*PullRows(&first, "t", Ids({0, 1, 2})));
    }  // closes its snapshot store

    ParameterServerCore restored(o);
    ASSERT_TRUE(restored.CreateVariables(req).ok());
    RestoreRequest back;
    back.set_step(2);
    back.set_checkpoint(dir);
    absl::StatusOr<RestoreResponse> r = restored.Restore(back);
    ASSERT_TRUE(r.ok()) << r.status();
    push(&restored, 2);
    push(&restored, 3);
    EXPECT_EQ(PullOne(&restored, "d"), want_d);
    EXPECT_EQ(Values(*PullRows(&restored, "t", Ids({0, 1, 2}))), want_t);
    EXPECT_NE(want_d[0], 0.5f);
  }
}

TEST(ServerCorePathsTest, ConcurrentPullsNeverSeeHalfAnUpdate) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Req(R"(
      variable { name: "big" dtype: DT_FLOAT shape { dim: 262144 } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 1 } } num_workers: 4)")).ok());
  std::vector<std::thread> threads;
  std::atomic<int> torn{0};
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(ps.Push(Id(w, i), {{"big", Fill({262144}, 1)}}).ok());
    });
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        std::vector<float> v = PullOne(&ps, "big");
        if (v.front() != v.back()) torn++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(PullOne(&ps, "big")[1000], -80);
  EXPECT_EQ(ps.Status().global_step(), 80);
}

TEST(ServerCorePathsTest, InitializersAgreeAcrossServersAndSlices) {
  const char* hash = R"(
      variable { name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 4 }
                 initializer { kind: UNIFORM minval: -1 maxval: 1 } seed: 7 }
      optimizer { sgd { learning_rate: 0.5 } })";
  ParameterServerCore a(Options()), b(Options());
  ASSERT_TRUE(a.CreateVariables(Req(hash)).ok());
  ASSERT_TRUE(b.CreateVariables(Req(hash)).ok());
  std::vector<float> ra = Values(*PullRows(&a, "h", Ids({5, 123456789})));
  std::vector<float> rb = Values(*PullRows(&b, "h", Ids({123456789, 5})));  // other order
  ASSERT_EQ(ra.size(), 8u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(ra[k], rb[4 + k]);
    EXPECT_EQ(ra[4 + k], rb[k]);
  }
  EXPECT_NE(ra[0], ra[4]);
  EXPECT_EQ(a.Status().rows(), 2);

  ParameterServerCore whole(Options()), slice(Options());
  ASSERT_TRUE(whole.CreateVariables(Req(R"(
      variable { name: "k" dtype: DT_FLOAT shape { dim: 6 dim: 5 } seed: 3 initializer { kind: GLOROT_UNIFORM } }
      optimizer { sgd { learning_rate: 0.5 } })")).ok());
  ASSERT_TRUE(slice.CreateVariables(Req(R"(
      variable { name: "k" dtype: DT_FLOAT shape { dim: 6 dim: 5 } seed: 3 row_begin: 2 row_end: 5
                 initializer { kind: GLOROT_UNIFORM } }
      optimizer { sgd { learning_rate: 0.5 } })")).ok());
  std::vector<float> all = PullOne(&whole, "k");
  std::vector<float> part = PullOne(&slice, "k");
  ASSERT_EQ(part.size(), 15u);
  EXPECT_EQ(part, std::vector<float>(all.begin() + 10, all.begin() + 25));
}

TEST(ServerCorePathsTest, RowRangeAndRowLimitChangeNothing) {
  ServerCoreOptions o = Options();
  o.max_rows_per_request = 4;
  ParameterServerCore ps(o);
  ASSERT_TRUE(ps.CreateVariables(Req(R"(
      variable { name: "e" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 10 dim: 2 }
                 row_begin: 5 row_end: 10 initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 1 } })")).ok());
  auto out = ps.PushRows(Id(0, 0), {{"e", Ids({5, 10}), Fill({2, 2}, 1)}});
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("10"));
  EXPECT_EQ(PullRows(&ps, "e", Ids({4})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PullRows(&ps, "e", Ids({5, 6, 7, 8, 9})).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ps.PushRows(Id(0, 1), {{"e", Ids({5, 6, 7, 8, 9}), Fill({5, 2}, 1)}}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Values(*PullRows(&ps, "e", Ids({5, 9}))), ElementsAre(0, 0, 0, 0));
  EXPECT_EQ(ps.Status().global_step(), 0);
}

TEST(ServerCorePathsTest, RepeatedIdsInOnePushAreOneUpdateOfTheirSum) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Req(R"(
      variable { name: "e" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 } initializer { kind: ZEROS } }
      optimizer { momentum { learning_rate: 1 momentum: 0.5 } })")).ok());
  Tensor grads = Tensor::FromVector<float>({1, 2, 10, 20, 3, 4, 100, 200}, TensorShape({4, 2}));
  ASSERT_TRUE(ps.PushRows(Id(0, 0), {{"e", Ids({7, 8, 7, 7}), grads}}).ok());
  // One momentum step per row: row 7 moves by 1+3+100, 2+4+200; row 8 by 10, 20.
  EXPECT_THAT(Values(*PullRows(&ps, "e", Ids({7, 8}))), ElementsAre(-104, -206, -10, -20));
  ASSERT_TRUE(ps.PushRows(Id(0, 1), {{"e", Ids({8}), Fill({1, 2}, 0)}}).ok());
  // Row 8's second update is momentum alone (0.5 * its accumulator).
  EXPECT_THAT(Values(*PullRows(&ps, "e", Ids({8}))), ElementsAre(-15, -30));
}

TEST(ServerCorePathsTest, DensePullsShareStorageCopyOnWrite) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Req(R"(
      variable { name: "m" dtype: DT_FLOAT shape { dim: 262144 } initializer { kind: ONES } }
      optimizer { sgd { learning_rate: 1 } })")).ok());
  auto a = Pull(&ps, {"m"});
  auto b = Pull(&ps, {"m"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)[0].second.SharesBufferWith((*b)[0].second));  // no copy per pull
  // An update while pulls hold the value leaves what they got unchanged.
  ASSERT_TRUE(ps.Push(Id(0, 0), {{"m", Fill({262144}, 1)}}).ok());
  EXPECT_EQ((*a)[0].second.data<float>()[12345], 1.0f);
  EXPECT_EQ(PullOne(&ps, "m")[12345], 0.0f);
  b = Pull(&ps, {"m"});
  EXPECT_FALSE((*a)[0].second.SharesBufferWith((*b)[0].second));
}

TEST(ServerCorePathsTest, PulledRowsReusePooledStorage) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Req(R"(
      variable { name: "e" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 2000 dim: 64 } initializer { kind: ONES } }
      optimizer { sgd { learning_rate: 1 } })")).ok());
  std::vector<int64_t> ids(1000);
  for (int i = 0; i < 1000; ++i) ids[i] = 2 * i;
  const void* first;
  {
    auto r = PullRows(&ps, "e", Ids(ids));
    ASSERT_TRUE(r.ok()) << r.status();
    first = r->raw_data();
  }
  auto again = PullRows(&ps, "e", Ids(ids));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->raw_data(), first);  // the released buffer came back
  EXPECT_EQ(again->data<float>()[12345], 1.0f);
  EXPECT_GE(ps.pool()->stats().hits, 1);
}

class CoreSnapshotTest : public ::testing::Test {
 protected:
  // Checkpoint "ckpt" of these PS lives in dir_/ckpt/ps-0.
  ServerCoreOptions Options() const {
    ServerCoreOptions o = psrt::Options();
    o.snapshot_root = dir_;
    return o;
  }
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/paths_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_EQ(std::system(absl::StrCat("rm -rf ", dir_).c_str()), 0);
  }
  static CreateVariablesRequest Vars() {
    return Req(R"(variable { name: "w" dtype: DT_FLOAT shape { dim: 3 } initializer { kind: ZEROS } }
                  optimizer { momentum { learning_rate: 1 momentum: 0.5 } })");
  }
  absl::Status Snap(ParameterServerCore* ps, int64_t step, int keep) {
    SnapshotRequest r;
    r.set_step(step);
    r.set_checkpoint("ckpt");
    r.set_wait_durable(true);
    r.set_keep(keep);
    return ps->Snapshot(r).status();
  }
  absl::Status Restore(ParameterServerCore* ps, int64_t step) {
    RestoreRequest r;
    r.set_step(step);
    r.set_checkpoint("ckpt");
    return ps->Restore(r).status();
  }
  std::string dir_;
};

TEST_F(CoreSnapshotTest, KeepsTheLastK) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Vars()).ok());
  for (int step = 1; step <= 4; ++step) ASSERT_TRUE(Snap(&ps, step, 2).ok());
  EXPECT_THAT(ps.Status().durable_snapshots(), ElementsAre(3, 4));
  EXPECT_EQ(Restore(&ps, 1).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Restore(&ps, 3).ok());
}

TEST_F(CoreSnapshotTest, CorruptSnapshotIsDataLossAndChangesNothing) {
  {
    ParameterServerCore ps(Options());
    ASSERT_TRUE(ps.CreateVariables(Vars()).ok());
    ASSERT_TRUE(Snap(&ps, 1, 3).ok());
  }
  {
    // The snapshot's data file (SNAPSHOT_FORMAT.md): its first bytes are
    // the first variable's value.
    std::string data;
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/ckpt/ps-0")) {
      if (e.path().extension() == ".data") data = e.path().string();
    }
    ASSERT_FALSE(data.empty());
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.write("bad!", 4);
    ASSERT_TRUE(f.good());
  }
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Vars()).ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), {{"w", Fill({3}, 1)}}).ok());
  absl::Status s = Restore(&ps, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(PullOne(&ps, "w"), ElementsAre(-1, -1, -1));
  // The momentum slot is intact too: the next step moves by 1 + 0.5.
  ASSERT_TRUE(ps.Push(Id(0, 1), {{"w", Fill({3}, 1)}}).ok());
  EXPECT_THAT(PullOne(&ps, "w"), ElementsAre(-2.5, -2.5, -2.5));
}

}  // namespace
}  // namespace psrt
