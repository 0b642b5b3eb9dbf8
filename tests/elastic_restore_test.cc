// A checkpoint taken with two parameter servers restored onto three and onto
// one, with real PS daemons on real sockets writing real RocksDB snapshots:
// a dense variable split by rows is re-split, a hash embedding table is
// re-sharded by id, and every value and Adam slot comes back bit-identical
// (read back from the new servers' own snapshots, not from their answers).
// Then the same through the launcher: a sparse model whose embedding is a
// hash table trained on 2 PS, continued on 3, then on 1.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "chief/cluster_clients.h"
#include "common/plan/placement.h"
#include "common/snapshot/snapshot_store.h"
#include "common/status_macros.h"
#include "common/store/variable.h"
#include "common/transport/ps_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"
#include "tests/harness/training_cluster.h"
#include "common/testing/python_tool.h"

namespace psrt {
namespace {

using testing::Daemon;

constexpr int64_t kRows = 11;  // w is [11, 4]: three shards of 3, 4, 4 rows
constexpr int64_t kDim = 4;

std::vector<VariableDef> Model() {
  std::vector<VariableDef> defs(2);
  google::protobuf::TextFormat::ParseFromString(R"(
      name: "w" dtype: DT_FLOAT shape { dim: 11 dim: 4 } initializer { kind: GLOROT_UNIFORM } seed: 5)",
                                                &defs[0]);
  google::protobuf::TextFormat::ParseFromString(R"(
      name: "emb" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 4 }
      initializer { kind: RANDOM_UNIFORM } seed: 6)",
                                                &defs[1]);
  return defs;
}

std::string SnapshotRoot() { return absl::StrCat(std::getenv("TEST_TMPDIR"), "/snapshots"); }

// N PS daemons sharing one snapshot directory, each with the variables the
// placement over N gives it (the chief's rule, common/plan/placement).
struct Servers {
  testing::TestCluster cluster;
  std::vector<std::unique_ptr<Daemon>> daemons;
  ChannelCache channels;
  std::vector<std::unique_ptr<PsAdmin>> admins;
  PlacementMap placement;

  void Start(int n, const std::string& name) {
    auto c = testing::MakeTestCluster(n, 1, name);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster = *c;
    auto p = PlaceVariables(Model(), n, /*partition_threshold_bytes=*/64);
    ASSERT_TRUE(p.ok()) << p.status();
    placement = *p;
    for (int i = 0; i < n; ++i) {
      auto d = Daemon::Start(absl::StrCat(name, "-ps:", i),
                             {testing::RunfilePath("ps/server"), "--cluster_spec=" + cluster.spec_path,
                              absl::StrCat("--task=ps:", i), "--snapshot_dir=" + SnapshotRoot()});
      ASSERT_TRUE(d.ok()) << d.status();
      daemons.push_back(*std::move(d));
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(daemons[i]->WaitForLine("serving at", absl::Seconds(60)));
      admins.push_back(std::make_unique<PsAdmin>(channels.Get(cluster.ps[i]), absl::StrCat("ps:", i)));
      CreateVariablesRequest req;
      ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
          "optimizer { adam { learning_rate: 0.05 } } num_workers: 1 consistency { mode: ASYNC }", &req));
      for (const VariableDef& v : VariablesOnStore(placement, i)) *req.add_variable() = v;
      auto r = admins[i]->CreateVariables(req);
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  std::unique_ptr<PsClient> Client() {
    return std::make_unique<PsClient>(placement, cluster.ps, &channels, PsClientOptions{});
  }
  std::vector<std::string> StoreNames() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < daemons.size(); ++i) out.push_back(absl::StrCat("ps-", i));
    return out;
  }
};

// Everything a checkpoint holds, keyed so that layouts compare: w's value
// and slot bytes by row, emb's by id.
struct Contents {
  std::map<int64_t, std::string> w_rows;
  std::map<int64_t, std::string> emb_rows;
  int64_t emb_updates = 0;
};

std::string Row(const VariableState& v, int64_t i) {
  const size_t row = kDim * sizeof(float);
  std::string out(static_cast<const char*>(v.value.raw_data()) + i * row, row);
  for (const Tensor& t : v.slots) out.append(static_cast<const char*>(t.raw_data()) + i * row, row);
  return out;
}

Contents Read(const std::string& checkpoint, const std::vector<std::string>& stores, int64_t step) {
  Contents c;
  for (const std::string& store : stores) {
    auto s = SnapshotStore::OpenReadOnly(absl::StrCat(SnapshotRoot(), "/", checkpoint, "/", store));
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return c;
    auto snap = (*s)->Read(step);
    EXPECT_TRUE(snap.ok()) << snap.status();
    if (!snap.ok()) return c;
    for (const VariableState& v : snap->variables) {
      EXPECT_EQ(v.slots.size(), 2u) << v.def.name();  // Adam: m and v
      if (v.def.name() == "w") {
        const int64_t begin = v.def.row_end() > 0 ? v.def.row_begin() : 0;
        for (int64_t i = 0; i < v.value.NumElements() / kDim; ++i) {
          EXPECT_TRUE(c.w_rows.emplace(begin + i, Row(v, i)).second) << "w row " << begin + i << " twice";
        }
      } else {
        c.emb_updates = std::max(c.emb_updates, v.updates);
        for (int64_t i = 0; i < v.ids.NumElements(); ++i) {
          const int64_t id = v.ids.data<int64_t>()[i];
          EXPECT_EQ(HashShardOf(id, v.def.hash_shards()), v.def.hash_shard()) << store << " holds id " << id;
          EXPECT_TRUE(c.emb_rows.emplace(id, Row(v, i)).second) << "emb id " << id << " twice";
        }
      }
    }
  }
  return c;
}

// Trains two PS for kStep steps and checkpoints them into `checkpoint`:
// once at the end, or with `full_every` > 0 every 10 steps, the first full
// and the rest deltas (incremental checkpoints). Then restores the last one
// onto three PS and onto one and compares everything with what the two held.
void TrainTwoPsAndRestore(const std::string& checkpoint, int full_every) {
  constexpr int64_t kStep = 40;
  std::map<std::string, Tensor> trained;
  Contents want;
  {
    Servers two;
    ASSERT_NO_FATAL_FAILURE(two.Start(2, "two-" + checkpoint));
    ASSERT_EQ(two.placement.variable(0).shard_size(), 2) << "w is meant to be split by rows";
    auto client = two.Client();
    // Steps of dense gradients and of rows (ids of both signs, so both
    // shards and the negative-id rule are exercised).
    for (int64_t step = 0; step < kStep; ++step) {
      Tensor g(DT_FLOAT, TensorShape({kRows, kDim}));
      for (int64_t i = 0; i < g.NumElements(); ++i) g.data<float>()[i] = std::sin(0.1f * i + step);
      std::vector<int64_t> ids;
      for (int64_t k = 0; k < 6; ++k) ids.push_back((step * 7 + k * 13) % 50 - 25);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      const int64_t n = static_cast<int64_t>(ids.size());
      Tensor rows(DT_FLOAT, TensorShape({n, kDim}));
      for (int64_t i = 0; i < rows.NumElements(); ++i) rows.data<float>()[i] = std::cos(0.3f * i - step);
      RequestId id;
      id.set_worker(0);
      id.set_worker_incarnation(1);
      id.set_step(step);
      ASSERT_TRUE(client
                      ->Push(id, {{"w", g}},
                             {{"emb", {Tensor::FromVector<int64_t>(ids, TensorShape({n})), rows}}})
                      .ok());
      if (full_every > 0 && (step + 1) % 10 == 0) {
        for (auto& admin : two.admins) {
          auto r = admin->Snapshot(step + 1, checkpoint, /*wait_durable=*/true, /*keep=*/2, {}, full_every);
          ASSERT_TRUE(r.ok()) << r.status();
          EXPECT_EQ(r->delta(), step + 1 > 10) << "step " << step + 1;
          if (r->delta()) {
            EXPECT_EQ(r->base_step(), step + 1 - 10);
          }
        }
      }
    }
    if (full_every > 0) {
      // The reference: the same state written whole, beside the chain.
      for (auto& admin : two.admins) ASSERT_TRUE(admin->Snapshot(kStep, checkpoint + "-ref", true, 3).ok());
      want = Read(checkpoint + "-ref", {"ps-0", "ps-1"}, kStep);
      const Contents chain = Read(checkpoint, {"ps-0", "ps-1"}, kStep);
      EXPECT_EQ(chain.w_rows, want.w_rows);
      EXPECT_EQ(chain.emb_rows, want.emb_rows);
      EXPECT_EQ(chain.emb_updates, want.emb_updates);
    } else {
      for (auto& admin : two.admins) ASSERT_TRUE(admin->Snapshot(kStep, checkpoint, /*wait_durable=*/true, /*keep=*/3).ok());
      want = Read(checkpoint, {"ps-0", "ps-1"}, kStep);
    }
    auto w = client->Pull({"w"}, kStep);
    ASSERT_TRUE(w.ok()) << w.status();
    trained["w"] = (*w)["w"];
  }  // the two PS are killed here
  ASSERT_EQ(want.w_rows.size(), static_cast<size_t>(kRows));
  ASSERT_GT(want.emb_rows.size(), 20u);

  for (int n : {3, 1}) {
    SCOPED_TRACE(absl::StrCat("onto ", n, " PS"));
    Servers more;
    ASSERT_NO_FATAL_FAILURE(more.Start(n, absl::StrCat("onto", n, "-", checkpoint)));
    for (auto& admin : more.admins) {
      auto r = admin->Restore(kStep, checkpoint, /*generation=*/3, {"ps-0", "ps-1"});
      ASSERT_TRUE(r.ok()) << r.status();
    }
    // What the workers see...
    auto client = more.Client();
    client->SetGeneration(3);
    auto w = client->Pull({"w"}, kStep);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(std::string(static_cast<const char*>((*w)["w"].raw_data()), (*w)["w"].TotalBytes()),
              std::string(static_cast<const char*>(trained["w"].raw_data()), trained["w"].TotalBytes()));
    // ...and everything, slots included, as the new servers write it.
    const std::string again = absl::StrCat(checkpoint, "-after", n);
    for (auto& admin : more.admins) ASSERT_TRUE(admin->Snapshot(kStep + 1, again, /*wait_durable=*/true, /*keep=*/3).ok());
    const Contents got = Read(again, more.StoreNames(), kStep + 1);
    EXPECT_EQ(got.w_rows, want.w_rows);
    EXPECT_EQ(got.emb_rows, want.emb_rows);
    EXPECT_EQ(got.emb_updates, want.emb_updates);
  }
}

TEST(ElasticRestoreTest, TwoPsRestoreOntoThreeAndOntoOneBitIdentical) { TrainTwoPsAndRestore("ckpt", 0); }

// Incremental checkpoints: a full snapshot and three deltas on each PS,
// sent over gRPC as the chief sends them, restored onto other PS counts.
TEST(ElasticRestoreTest, AChainOfDeltasRestoresOntoThreeAndOntoOneBitIdentical) {
  TrainTwoPsAndRestore("ckpt-inc", 8);
}

// Each leg continues from the previous leg's last checkpoint on another
// number of PS; the hash table is re-sharded by id every time.
// The sparse example with a hash table (input_dim 0: rows made on first
// touch, any id) on data made in DIR-data, checkpointed every
// `checkpoint_every` steps.
absl::StatusOr<TrainingJob> SparseHashJob(const std::string& dir, int64_t checkpoint_every) {
  RETURN_IF_ERROR(testing::RunPythonTool("examples/make_sparse_data.py", {dir + "-data"}));
  ASSIGN_OR_RETURN(TrainingJob job, LoadJob(testing::RunfilePath("examples/sparse_libsvm.pbtxt")));
  job.mutable_model()->mutable_sequential()->mutable_layer(0)->mutable_embedding_bag()->set_input_dim(0);
  job.mutable_input()->mutable_train()->set_files(0, dir + "-data/train.svm");
  job.mutable_input()->mutable_test()->set_files(0, dir + "-data/test.svm");
  job.set_epochs(0);
  job.mutable_checkpoint()->set_every_steps(checkpoint_every);
  job.clear_summary_path();
  job.clear_log_dir();
  job.clear_eval();
  return job;
}

struct Leg {
  int ps;
  int64_t steps;
  int64_t restored_from;
};

// Runs the legs in order, each continuing from the previous one's last
// checkpoint on its number of PS.
void RunLegs(const TrainingJob& base, const std::string& dir, const std::vector<Leg>& legs) {
  for (size_t i = 0; i < legs.size(); ++i) {
    const Leg& leg = legs[i];
    TrainingJob job = base;
    job.set_steps(leg.steps);
    const std::string s = testing::RunLauncherLeg(absl::StrCat("leg", i), job, dir,
                                                  {"--workers=2", absl::StrCat("--ps=", leg.ps)}, leg.restored_from >= 0);
    ASSERT_FALSE(s.empty()) << "leg " << i;
    EXPECT_EQ(testing::SummaryNumber(s, "\"restored_from_step\": (-?[0-9]+)"), leg.restored_from) << "leg " << i;
    EXPECT_EQ(testing::SummaryNumber(s, "\"steps\": ([0-9]+)"), leg.steps) << "leg " << i;
    // The chief evaluates the hash table by rows read without making any.
    EXPECT_GT(testing::SummaryNumber(s, "\"accuracy\": ([0-9.]+)"), 0.8) << "leg " << i;  // labels carry 5% noise
  }
}

TEST(ElasticRestoreTest, AHashTableModelContinuesOnThreePsThenOne) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/legs");
  auto base = SparseHashJob(dir, 300);
  ASSERT_TRUE(base.ok()) << base.status();
  RunLegs(*base, dir, {{2, 600, -1}, {3, 1200, 600}, {1, 1800, 1200}});
}

// Incremental checkpoints through the chief and the launcher: the first
// leg's checkpoints after the first are deltas (its last, which the second
// leg restores onto 3 PS, one on a chain of five), and the checkpoint
// inspector says which is which.
TEST(ElasticRestoreTest, IncrementalCheckpointsContinueOnThreePs) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/inc-legs");
  auto base = SparseHashJob(dir, 100);
  ASSERT_TRUE(base.ok()) << base.status();
  base->mutable_checkpoint()->set_incremental(true);
  base->mutable_checkpoint()->set_keep(2);
  RunLegs(*base, dir, {{2, 600, -1}, {3, 800, 600}});
  auto inspect = Daemon::Start("checkpoints", {testing::RunfilePath("chief/checkpoints"), dir + "/checkpoints"});
  ASSERT_TRUE(inspect.ok()) << inspect.status();
  // keep 2: the second leg's first checkpoint (at about step 700, full:
  // the first after a restore) and its last, at 800, a delta on it.
  const std::string first = (*inspect)->WaitForMatch("^7[0-9][0-9] .* full", absl::Minutes(1));
  ASSERT_FALSE(first.empty());
  const std::string full_step = first.substr(0, 3);
  EXPECT_FALSE((*inspect)->WaitForMatch(absl::StrCat("^800 .* delta on ", full_step, "[ ,]"), absl::Minutes(1)).empty())
      << "after the full checkpoint of step " << full_step;
  absl::StatusOr<int> rc = (*inspect)->Wait(absl::Minutes(1));
  ASSERT_TRUE(rc.ok()) << rc.status();
  EXPECT_EQ(*rc, 0);
}

}  // namespace
}  // namespace psrt
