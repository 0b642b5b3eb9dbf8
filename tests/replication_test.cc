// Replicated PS shards (job.replication.factor 2, issue #15) with real
// processes on real sockets.
//
// PsPair: two ps:server daemons, the test acting as the chief. Store 0's
// primary is ps:0, its backup ps:1. Two workers push concurrently (dense
// gradients and hash-table rows, Adam: slots and step counters); every
// acknowledged push is then on the backup bit-identically (read after
// promoting it, as a failover does), a retried push stays applied once on
// the promoted backup, and stale epochs are refused: a worker with the old
// placement, and the old primary itself (cut off, not dead) which can
// acknowledge nothing once its backup was promoted.
//
// Cluster: a chief, two PS and two workers training the MLP with factor 2;
// ps:0 is SIGKILLed mid-run. Training finishes without a restore, the
// chief reports one failover and zero rolled-back steps, and every store's
// applied pushes equal the workers' steps: no acknowledged update lost,
// none applied twice.
#include <signal.h>

#include <cstring>
#include <iostream>
#include <random>
#include <thread>
#include <tuple>

#include "chief/cluster_clients.h"
#include "common/transport/ps_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;
using testing::Daemon;

constexpr char kVariables[] = R"(
  variable { name: "w" dtype: DT_FLOAT shape { dim: 64 dim: 8 }
             initializer { kind: TRUNCATED_NORMAL stddev: 0.1 } seed: 7 }
  variable { name: "emb" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 4 }
             initializer { kind: TRUNCATED_NORMAL stddev: 0.1 } seed: 9 }
  optimizer { adam { learning_rate: 0.01 } }
  consistency { mode: ASYNC }
  num_workers: 2)";

RequestId Id(int worker, int64_t step) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(100 + worker);
  id.set_step(step);
  return id;
}

ReplicaRoute RouteOf(int64_t epoch, int store0_task) {
  ReplicaRoute r;
  r.set_epoch(epoch);
  r.add_store_task(store0_task);
  return r;
}

class PsPair : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = testing::MakeTestCluster(2, 2, "pair");
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *c;
    for (int p = 0; p < 2; ++p) {
      auto d = Daemon::Start(absl::StrCat("ps:", p),
                             {testing::RunfilePath("ps/server"), "--cluster_spec=" + cluster_.spec_path,
                              absl::StrCat("--task=ps:", p),
                              absl::StrCat("--snapshot_dir=", std::getenv("TEST_TMPDIR"), "/ps", p)});
      ASSERT_TRUE(d.ok()) << d.status();
      ps_[p] = *std::move(d);
    }
    for (int p = 0; p < 2; ++p) {
      ASSERT_TRUE(ps_[p]->WaitForLine("serving at", absl::Seconds(60)));
      admin_[p] = std::make_unique<PsAdmin>(channels_.Get(cluster_.ps[p]), absl::StrCat("ps:", p));
    }
    for (const char* name : {"w", "emb"}) {
      VariablePlacement* vp = placement_.add_variable();
      vp->mutable_variable()->set_name(name);
      vp->mutable_variable()->mutable_shape()->add_dim(std::string(name) == "w" ? 64 : 0);
      vp->mutable_variable()->mutable_shape()->add_dim(std::string(name) == "w" ? 8 : 4);
      if (std::string(name) == "emb") vp->mutable_variable()->set_kind(VariableDef::HASH_TABLE);
      VariablePlacement::Shard* s = vp->add_shard();
      s->set_ps_task(0);
      s->set_backup_ps_task(1);
    }
  }
  // Store 0's variables on `ps` with `role` at `epoch` (what the chief sends).
  absl::Status Configure(int ps, int64_t epoch, bool backup, int backup_task) {
    CreateVariablesRequest req;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kVariables, &req));
    ReplicaConfig* rc = req.mutable_replica();
    rc->set_store(0);
    rc->set_epoch(epoch);
    rc->set_backup(backup);
    if (backup_task >= 0) {
      rc->set_backup_task(backup_task);
      rc->set_backup_address(cluster_.ps[backup_task]);
    }
    return admin_[ps]->CreateVariables(req).status();
  }
  std::unique_ptr<PsClient> Client(int worker, const ReplicaRoute& route) {
    PsClientOptions o;
    o.worker = worker;
    o.timeout = absl::Seconds(20);
    auto c = std::make_unique<PsClient>(placement_, cluster_.ps, &channels_, o);
    c->SetRoute(route);
    return c;
  }
  // The dense values and the rows of ids 0..19, as raw bytes.
  std::string Read(PsClient* c) {
    auto w = c->Pull({"w"}, 0);
    EXPECT_TRUE(w.ok()) << w.status();
    std::vector<int64_t> ids(20);
    for (int i = 0; i < 20; ++i) ids[i] = i * 1000003LL;
    auto rows = c->PullRows({{"emb", Tensor::FromVector<int64_t>(ids, TensorShape({20}))}}, 0);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!w.ok() || !rows.ok()) return "";
    const Tensor& a = (*w)["w"];
    const Tensor& b = (*rows)["emb"];
    return std::string(static_cast<const char*>(a.raw_data()), a.TotalBytes()) +
           std::string(static_cast<const char*>(b.raw_data()), b.TotalBytes());
  }
  static absl::Status PushStep(PsClient* c, int worker, int64_t step) {
    std::mt19937 rng(static_cast<uint32_t>(worker * 100000 + step));
    std::normal_distribution<float> g;
    std::vector<float> dense(64 * 8), rows(3 * 4);
    for (float& x : dense) x = g(rng);
    for (float& x : rows) x = g(rng);
    std::vector<int64_t> ids = {static_cast<int64_t>(rng() % 20) * 1000003LL, 7 * 1000003LL, -5};
    if (ids[0] == ids[1]) ids[0] = 3 * 1000003LL;
    return c->Push(Id(worker, step), {{"w", Tensor::FromVector<float>(dense, TensorShape({64, 8}))}},
                   {{"emb", {Tensor::FromVector<int64_t>(ids, TensorShape({3})),
                             Tensor::FromVector<float>(rows, TensorShape({3, 4}))}}});
  }
  absl::StatusOr<PsStatusResponse> StoreStatus(int ps, int64_t epoch) {
    PsAdmin a(channels_.Get(cluster_.ps[ps]), absl::StrCat("ps:", ps));
    a.SetReplica(0, epoch);
    return a.Status();
  }

  testing::TestCluster cluster_;
  std::unique_ptr<Daemon> ps_[2];
  std::unique_ptr<PsAdmin> admin_[2];
  ChannelCache channels_;
  PlacementMap placement_;
};

TEST_F(PsPair, AcknowledgedPushesAreOnTheBackupBitIdenticallyAndStaleEpochsAreRefused) {
  constexpr int kSteps = 60;
  ASSERT_TRUE(Configure(1, 1, /*backup=*/true, -1).ok());
  ASSERT_TRUE(Configure(0, 1, /*backup=*/false, 1).ok());
  // A backup cannot be made primary of a store it never held, and no PS
  // takes an epoch older than its own.
  CreateVariablesRequest none;
  none.mutable_replica()->set_store(5);
  none.mutable_replica()->set_epoch(1);
  none.set_num_workers(1);
  *none.mutable_optimizer() = OptimizerDef();
  none.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  EXPECT_THAT(std::string(admin_[1]->CreateVariables(none).status().message()), HasSubstr("holds no copy of store 5"));

  // Two workers push at once through the primary.
  std::vector<std::thread> workers;
  std::atomic<int> failed{0};
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      auto c = Client(w, RouteOf(1, 0));
      for (int64_t s = 0; s < kSteps; ++s) {
        absl::Status st = PushStep(c.get(), w, s);
        if (!st.ok()) {
          ADD_FAILURE() << st;
          ++failed;
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_EQ(failed.load(), 0);
  auto c0 = Client(0, RouteOf(1, 0));
  ASSERT_TRUE(PushStep(c0.get(), 0, kSteps - 1).ok());  // a retry: a duplicate on both
  const std::string primary = Read(c0.get());
  ASSERT_FALSE(primary.empty());
  auto st0 = StoreStatus(0, 1);
  ASSERT_TRUE(st0.ok()) << st0.status();
  EXPECT_EQ(st0->global_step(), 2 * kSteps);
  // Pulls from the backup are refused while it is one.
  auto on_backup = Client(0, RouteOf(1, 1));
  EXPECT_THAT(std::string(on_backup->Pull({"w"}, 0).status().message()), HasSubstr("holds only a backup of store 0"));

  // Failover: the backup promoted at epoch 2. ps:0 is left running at
  // epoch 1, as a primary cut off from the chief would be.
  ASSERT_TRUE(Configure(1, 2, /*backup=*/false, -1).ok());
  auto c1 = Client(0, RouteOf(2, 1));
  EXPECT_EQ(Read(c1.get()), primary) << "the promoted backup differs from what the primary acknowledged";
  auto st1 = StoreStatus(1, 2);
  ASSERT_TRUE(st1.ok()) << st1.status();
  EXPECT_EQ(st1->global_step(), 2 * kSteps);  // the step counter replicated too
  // Exactly once across the failover: a retry of an acknowledged push.
  ASSERT_TRUE(PushStep(c1.get(), 1, kSteps - 1).ok());
  EXPECT_EQ(Read(c1.get()), primary);

  // A worker with the old placement is refused by the new primary...
  auto stale = Client(1, RouteOf(1, 1));
  absl::Status s = PushStep(stale.get(), 1, kSteps);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("placement epoch 1 refused: ps:1 is at placement epoch 2"));
  // ...and the old primary can acknowledge nothing: its backup is a
  // primary now and refuses its forwards.
  s = PushStep(c0.get(), 1, kSteps);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not acknowledged"));
  EXPECT_EQ(Read(c1.get()), primary) << "a push the old primary could not acknowledge reached the new one";
  auto st = admin_[1]->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->epoch(), 2);
  EXPECT_GE(st->stale_epoch_refused(), 2);
  // Moving back to an older epoch is refused.
  EXPECT_THAT(std::string(Configure(1, 1, false, -1).message()), HasSubstr("older than"));
  // Hostile metadata is refused naming the entry.
  auto stub = ParameterServer::NewStub(channels_.Get(cluster_.ps[1]));
  for (auto [store, epoch, what] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"x", "2", "psrt-store 'x'"}, {"0", "-3", "psrt-epoch '-3'"}, {"0", "", "psrt-epoch ''"}}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("psrt-store", store);
    ctx.AddMetadata("psrt-epoch", epoch);
    PsStatusResponse resp;
    grpc::Status bad = stub->Status(&ctx, PsStatusRequest(), &resp);
    EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what;
    EXPECT_THAT(bad.error_message(), HasSubstr(what));
  }
}

class ReplicatedCluster : public testing::TrainingClusterTest {
 protected:
  // Trains the MLP with factor 2, sends ps:0 `sig` under load (SIGSTOP:
  // continued once the chief failed it over, a primary cut off and back),
  // and checks the job ends with no restore and no push lost or doubled.
  void FailOverPs0(int sig);
};

TEST_F(ReplicatedCluster, PsKilledUnderLoadFailsOverWithoutRollbackOrLostPushes) { FailOverPs0(SIGKILL); }

// Split brain: ps:0 stopped (not dead) long enough to be failed over, then
// continued with its old state and epoch. Its backup, promoted, refuses
// its forwards, so it acknowledges nothing more, and the counts stay exact;
// answering again, it is rebuilt from the copies that served meanwhile.
TEST_F(ReplicatedCluster, PsStoppedAndContinuedAfterFailoverAcknowledgesNothing) { FailOverPs0(SIGSTOP); }

void ReplicatedCluster::FailOverPs0(int sig) {
  constexpr int64_t kSteps = 2000;  // per worker
  Setup(2, 2, ConsistencyDef::ASYNC, kSteps);
  job_.mutable_replication()->set_factor(2);
  job_.mutable_replication()->set_failover_after_ms(200);
  job_.mutable_checkpoint()->set_every_steps(0);  // only the first and the last: no restore to fall back on quietly
  job_.mutable_failure()->set_ps_wait_ms(60000);   // a failover that never comes fails the test, not hangs it
  WriteJob();
  auto ps0 = StartPs(0);
  auto ps1 = StartPs(1);
  auto w0 = StartWorker(0);
  auto w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && ps0 && ps1 && w0 && w1);
  // Under load: past step 300 of 2000.
  ASSERT_FALSE(chief->WaitForMatch("step ([3-9][0-9][0-9]|1[0-9][0-9][0-9])/", absl::Minutes(3)).empty());
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(ps0->Kill(sig));
  ASSERT_TRUE(chief->WaitForLine("failover: ps:0 is gone", absl::Minutes(1)));
  std::cerr << "\nFIGURE: PS " << (sig == SIGKILL ? "SIGKILL" : "SIGSTOP")
            << " -> chief's failover done, workers resumed on the promoted backup: "
            << absl::ToDoubleSeconds(absl::Now() - killed) << " s (failover_after_ms 200)\n";
  if (sig == SIGSTOP) {
    ASSERT_TRUE(ps0->Kill(SIGCONT));
    // Back with its old state: rebuilt from the copies that served meanwhile.
    ASSERT_TRUE(chief->WaitForLine("rebuilt: ps:0", absl::Minutes(1)));
  }
  ASSERT_EQ(ExitCode(chief.get()), 0);
  const std::string summary = Summary();
  std::cerr << "FIGURE: summary " << summary << std::endl;
  EXPECT_EQ(Field(summary, "failovers"), 1) << summary;
  EXPECT_EQ(Field(summary, "rolled_back_steps"), 0) << summary;
  EXPECT_EQ(Field(summary, "restored_from_step"), -1) << summary;
  EXPECT_EQ(Field(summary, "steps"), kSteps) << summary;
  EXPECT_GT(Field(summary, "accuracy"), 0.7) << summary;
  EXPECT_FALSE(chief->WaitForLine("recovering:", absl::ZeroDuration())) << "a restore ran";
  // Every acknowledged push applied once: each store (ps:1's own, and
  // store 0 it took over) applied one push per worker step.
  ChannelCache channels;
  PsAdmin own(channels.Get(cluster_.ps[1]), "ps:1");
  auto st = own.Status();
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->global_step(), 2 * kSteps) << "store 1";
  ASSERT_GT(st->epoch(), 0);
  PsAdmin taken(channels.Get(cluster_.ps[1]), "ps:1");
  taken.SetReplica(0, st->epoch());
  auto st0 = taken.Status();
  ASSERT_TRUE(st0.ok()) << st0.status();
  EXPECT_EQ(st0->global_step(), 2 * kSteps) << "store 0, promoted on ps:1";
  if (sig == SIGSTOP) {
    // The old primary, rebuilt, is store 0's primary again at the current
    // epoch, and its copy applied every push too (and store 1's backup).
    EXPECT_EQ(Field(summary, "rebuilds"), 1) << summary;
    PsAdmin old(channels.Get(cluster_.ps[0]), "ps:0");
    auto st_old = old.Status();
    ASSERT_TRUE(st_old.ok()) << st_old.status();
    EXPECT_EQ(st_old->epoch(), st->epoch());
    EXPECT_EQ(st_old->global_step(), 2 * kSteps) << "store 0, rebuilt on ps:0";
    PsAdmin backup1(channels.Get(cluster_.ps[0]), "ps:0");
    backup1.SetReplica(1, st->epoch());
    auto st_b1 = backup1.Status();
    ASSERT_TRUE(st_b1.ok()) << st_b1.status();
    EXPECT_EQ(st_b1->global_step(), 2 * kSteps) << "store 1's backup, rebuilt on ps:0";
  }
}

}  // namespace
}  // namespace psrt
