// The PS daemon as a real process on a real socket: the worker's client
// against it in ASYNC and SYNC (two concurrent workers), bad input refused
// over the wire, and a SIGKILL during a background snapshot after which a
// restore takes the previous complete snapshot, never the partial one.
#include <signal.h>

#include <thread>

#include "chief/cluster_clients.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "ps/ps_client.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;
using testing::Daemon;

constexpr char kVariables[] = R"(
  variable { name: "w" dtype: DT_FLOAT shape { dim: 4 } initializer { kind: ZEROS } }
  variable { name: "emb" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 }
             initializer { kind: ZEROS } }
  optimizer { sgd { learning_rate: 0.5 } })";

struct Ps {
  testing::TestCluster cluster;
  std::unique_ptr<Daemon> daemon;
  ChannelCache channels;
  std::unique_ptr<PsAdmin> admin;

  void Start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {testing::RunfilePath("ps/server"),
                                     "--cluster_spec=" + cluster.spec_path, "--task=ps:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto d = Daemon::Start("ps:0", argv);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon = *std::move(d);
    ASSERT_TRUE(daemon->WaitForLine("serving at", absl::Seconds(60)));
    channels.Drop(cluster.ps[0]);
    admin = std::make_unique<PsAdmin>(channels.Get(cluster.ps[0]), "ps:0");
  }
  void Create(const std::string& mode, int workers) {
    CreateVariablesRequest req;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kVariables, &req));
    ConsistencyDef::Mode m = ConsistencyDef::ASYNC;
    ConsistencyDef::Mode_Parse(mode, &m);
    req.mutable_consistency()->set_mode(m);
    req.set_num_workers(workers);
    auto r = admin->CreateVariables(req);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  std::unique_ptr<PsClient> Client(int worker) {
    PlacementMap placement;
    for (const char* name : {"w", "emb"}) {
      VariablePlacement* vp = placement.add_variable();
      vp->mutable_variable()->set_name(name);
      if (std::string(name) == "emb") {
        vp->mutable_variable()->set_kind(VariableDef::HASH_TABLE);
        vp->mutable_variable()->mutable_shape()->add_dim(0);
        vp->mutable_variable()->mutable_shape()->add_dim(2);
      }
      vp->add_shard()->set_ps_task(0);
    }
    PsClientOptions o;
    o.worker = worker;
    return std::make_unique<PsClient>(placement, cluster.ps, &channels, o);
  }
};

RequestId Id(int worker, int64_t step) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(1);
  id.set_step(step);
  return id;
}

TensorMap Grad(float g) {
  Tensor t(DT_FLOAT, TensorShape({4}));
  t.flat<float>().setConstant(g);
  return {{"w", t}};
}

float W0(PsClient* c, int64_t step = 0) {
  auto w = c->Pull({"w"}, step);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? (*w)["w"].data<float>()[0] : NAN;
}

TEST(PsServerTest, AsyncPushPullAndBadInputOverTheWire) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "async");
  ps.Start({"--max_request_mb=1"});
  ps.Create("ASYNC", 1);
  auto client = ps.Client(0);
  ASSERT_TRUE(client->Push(Id(0, 0), Grad(2), {}).ok());
  ASSERT_TRUE(client->Push(Id(0, 0), Grad(2), {}).ok());  // a retry: applied once
  EXPECT_FLOAT_EQ(W0(client.get()), -1.0f);

  Tensor ids = Tensor::FromVector<int64_t>({3, 1LL << 40}, TensorShape({2}));
  ASSERT_TRUE(client->Push(Id(0, 1), {}, {{"emb", {ids, Tensor::FromVector<float>({1, 1, 2, 2}, TensorShape({2, 2}))}}}).ok());
  auto rows = client->PullRows({{"emb", ids}}, 0);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_FLOAT_EQ((*rows)["emb"].data<float>()[3], -1.0f);

  auto bad = client->Push(Id(0, 2), {{"w", Tensor::Zeros(DT_FLOAT, TensorShape({5}))}}, {});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("ps:0: Push: variable w: gradient is float32[5]"));
  auto big = client->Push(Id(0, 3), {{"w", Tensor::Zeros(DT_FLOAT, TensorShape({1 << 19}))}}, {});
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big;
  EXPECT_FLOAT_EQ(W0(client.get()), -1.0f);  // nothing changed
  auto st = ps.admin->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->variables(), 2);
  EXPECT_EQ(st->rows(), 2);
}

TEST(PsServerTest, SyncWithTwoConcurrentWorkers) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 2, "sync");
  ps.Start();
  ps.Create("SYNC", 2);
  constexpr int kSteps = 20;
  std::vector<std::vector<float>> seen(2);
  auto run = [&](int worker) {
    auto client = ps.Client(worker);
    for (int step = 0; step < kSteps; ++step) {
      seen[worker].push_back(W0(client.get(), step));
      // Worker 0 pushes 1, worker 1 pushes 3: the mean, 2, is applied.
      ASSERT_TRUE(client->Push(Id(worker, step), Grad(worker == 0 ? 1.0f : 3.0f), {}).ok());
    }
  };
  std::thread a(run, 0), b(run, 1);
  a.join();
  b.join();
  // Both saw exactly the parameters of each step: -1 per step (lr 0.5 * 2).
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_FLOAT_EQ(seen[0][step], -1.0f * step);
    EXPECT_FLOAT_EQ(seen[1][step], -1.0f * step);
  }
}

TEST(PsServerTest, KilledDuringABackgroundSnapshotRestoresThePreviousOne) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ckpt";
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "kill");
  ps.Start();
  ps.Create("ASYNC", 1);
  auto client = ps.Client(0);
  ASSERT_TRUE(client->Push(Id(0, 0), Grad(2), {}).ok());  // w = -1
  ASSERT_TRUE(ps.admin->Snapshot(1, dir, /*wait_durable=*/true, 3).ok());
  ps.daemon->Kill(SIGKILL);
  ASSERT_TRUE(ps.daemon->Wait(absl::Seconds(30)).ok());

  // A second life that stalls inside its next snapshot write, then dies.
  ps.Start({"--fault_pause_snapshot_after_chunks=1"});
  ps.Create("ASYNC", 1);
  RestoreRequest r1;
  ASSERT_TRUE(ps.admin->Restore(1, dir).ok());
  client = ps.Client(0);
  EXPECT_FLOAT_EQ(W0(client.get()), -1.0f);
  ASSERT_TRUE(client->Push(Id(0, 1), Grad(2), {}).ok());  // w = -2
  auto snap = ps.admin->Snapshot(2, dir, /*wait_durable=*/false, 3);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE(ps.daemon->WaitForLine("FAULT: snapshot writer stalled", absl::Seconds(60)));
  ps.daemon->Kill(SIGKILL);
  ASSERT_TRUE(ps.daemon->Wait(absl::Seconds(30)).ok());

  // A third life: step 2 was never completed, step 1 is whole.
  ps.Start();
  ps.Create("ASYNC", 1);
  auto partial = ps.admin->Restore(2, dir);
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kNotFound) << partial.status();
  client = ps.Client(0);
  EXPECT_FLOAT_EQ(W0(client.get()), 0.0f);  // the refused restore changed nothing
  ASSERT_TRUE(ps.admin->Restore(1, dir).ok());
  EXPECT_FLOAT_EQ(W0(client.get()), -1.0f);
  auto st = ps.admin->Status();
  EXPECT_THAT(st->durable_snapshots(), ::testing::ElementsAre(1));
}

}  // namespace
}  // namespace psrt
