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
#include <fstream>
#include <iostream>
#include <random>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "chief/cluster_clients.h"
#include "common/plan/job_planner.h"
#include "common/subprocess.h"
#include "common/transport/chief_client.h"
#include "common/transport/ps_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/harness/netns_partition.h"
#include "tests/harness/training_cluster.h"
// After Eigen (through the harness): <resolv.h>, which httplib includes,
// defines a macro `_res` that Eigen uses as a parameter name.
#include "httplib.h"

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
  // What befalls ps:0 under load.
  enum class Fault {
    kKill,  // SIGKILL
    kStop,  // SIGSTOP, continued once training went on without it
    kCut,   // its network namespace cut off from every other task, joined again later
  };
  // Trains the MLP with factor 2, brings `fault` on ps:0 under load, and
  // checks the job ends with no restore and no push lost or doubled; after
  // a stop or a cut (a primary cut off and back: split brain) the old
  // primary can acknowledge nothing.
  void FailOverPs0(Fault fault);
  // Waits until the chief reports step `step` or more (its progress lines
  // after line `from`); false after `timeout`.
  bool WaitForChiefStep(Daemon* chief, int64_t step, size_t from, absl::Duration timeout);
  // Split brain: ps:0, store 0's old primary, answers again at its old
  // placement epoch `old_epoch` after the chief promoted store 0's backup
  // on ps:1. Pushes of the job's variables (zero gradients, a worker
  // incarnation of the test's own) with the old placement: ps:0 applies
  // but cannot acknowledge (its forward is refused by ps:1, a primary
  // now), and ps:1 refuses the old epoch outright, for either store.
  // `generation`: the job's (the PS check it before the epoch).
  void ExpectOldPrimaryAcknowledgesNothing(int64_t old_epoch, int64_t generation);
  // The cluster moved onto `p`'s addresses: ps:0 inside its namespace,
  // every other task outside (same ports), the spec file rewritten.
  void MoveOnto(const testing::NetnsPartition& p);
};

TEST_F(ReplicatedCluster, PsKilledUnderLoadFailsOverWithoutRollbackOrLostPushes) { FailOverPs0(Fault::kKill); }

// Split brain: ps:0 stopped (not dead) long enough to be failed over, then
// continued with its old state and epoch. Its backup, promoted, refuses
// its forwards, so it acknowledges nothing more, and the counts stay exact;
// answering again, it is rebuilt from the copies that served meanwhile.
TEST_F(ReplicatedCluster, PsStoppedAndContinuedAfterFailoverAcknowledgesNothing) { FailOverPs0(Fault::kStop); }

// Split brain over the network: ps:0 runs on, in a network namespace whose
// link to every other task is taken down and brought up again.
TEST_F(ReplicatedCluster, PsCutOffAndJoinedAgainAfterFailoverAcknowledgesNothing) { FailOverPs0(Fault::kCut); }

void ReplicatedCluster::MoveOnto(const testing::NetnsPartition& p) {
  auto move = [](std::string* address, const std::string& host) { *address = host + address->substr(address->rfind(':')); };
  move(&cluster_.chief, p.outside());
  move(&cluster_.ps[0], p.inside());
  move(&cluster_.ps[1], p.outside());
  for (std::string& w : cluster_.workers) move(&w, p.outside());
  std::ofstream(cluster_.spec_path) << "{\"chief\": [\"" << cluster_.chief << "\"], \"ps\": [\"" << cluster_.ps[0]
                                    << "\", \"" << cluster_.ps[1] << "\"], \"worker\": [\"" << cluster_.workers[0]
                                    << "\", \"" << cluster_.workers[1] << "\"]}\n";
}

void ReplicatedCluster::FailOverPs0(Fault fault) {
  constexpr int64_t kSteps = 2000;  // per worker
  Setup(2, 2, ConsistencyDef::ASYNC, kSteps);
  std::unique_ptr<testing::NetnsPartition> partition;
  if (fault == Fault::kCut) {
    auto p = testing::NetnsPartition::Create();
    if (!p.ok()) GTEST_SKIP() << "cannot make a network namespace to cut ps:0 off (needs the rights of `ip netns add`): " << p.status();
    partition = *std::move(p);
    MoveOnto(*partition);
  }
  job_.mutable_replication()->set_factor(2);
  job_.mutable_replication()->set_failover_after_ms(200);
  job_.mutable_checkpoint()->set_every_steps(0);  // only the first and the last: no restore to fall back on quietly
  job_.mutable_failure()->set_ps_wait_ms(60000);   // a failover that never comes fails the test, not hangs it
  WriteJob();
  std::unique_ptr<Daemon> ps0;
  if (partition != nullptr) {
    std::vector<std::string> argv = {testing::RunfilePath("ps/server")};
    for (const std::string& a : Common("ps:0")) argv.push_back(a);
    auto d = Daemon::Start("ps:0", partition->In(argv));
    ASSERT_TRUE(d.ok()) << d.status();
    ps0 = *std::move(d);
  } else {
    ps0 = StartPs(0);
  }
  // ps:1's /metrics shows the role of each store it holds.
  const absl::StatusOr<int> http_port = PickFreePort();
  ASSERT_TRUE(http_port.ok()) << http_port.status();
  auto ps1 = Start("ps/server", "ps:1", {absl::StrCat("--http_port=", *http_port)});
  auto metrics = [port = *http_port] {
    httplib::Client http("127.0.0.1", port);
    auto r = http.Get("/metrics");
    return r && r->status == 200 ? r->body : std::string();
  };
  auto w0 = StartWorker(0);
  auto w1 = StartWorker(1);
  auto chief = StartChief();
  ASSERT_TRUE(chief && ps0 && ps1 && w0 && w1);
  // Under load: past step 300 of 2000.
  ASSERT_FALSE(chief->WaitForMatch("step ([3-9][0-9][0-9]|1[0-9][0-9][0-9])/", absl::Minutes(3)).empty());
  ChannelCache channels;
  PsAdmin ps0_admin(channels.Get(cluster_.ps[0]), "ps:0");
  auto before = ps0_admin.Status();
  ASSERT_TRUE(before.ok()) << before.status();
  // Replica health as the status page and /metrics show it.
  ChiefClient chief_client(channels.Get(cluster_.chief), cluster_.chief);
  auto health = chief_client.JobStatus();
  ASSERT_TRUE(health.ok()) << health.status();
  ASSERT_EQ(health->replica_size(), 2) << health->DebugString();
  EXPECT_EQ(health->replica(0).primary(), "ps:0");
  EXPECT_EQ(health->replica(0).backup(), "ps:1");
  EXPECT_EQ(health->replica(0).state(), JobStatusResponse::Replica::REPLICATED);
  EXPECT_EQ(health->replica(1).primary(), "ps:1");
  EXPECT_EQ(health->replica(1).backup(), "ps:0");
  EXPECT_EQ(health->replica(0).epoch(), before->epoch());
  EXPECT_EQ(health->failovers(), 0);
  std::string page = metrics();
  EXPECT_NE(page.find("psrt_ps_store_role{task=\"ps:1\",store=\"1\",role=\"primary\"} 1\n"), std::string::npos) << page;
  EXPECT_NE(page.find("psrt_ps_store_role{task=\"ps:1\",store=\"0\",role=\"backup\"} 1\n"), std::string::npos) << page;
  EXPECT_EQ(page.find("psrt_ps_requests_total{task=\"ps:1\",method=\"replicate\"} 0\n"), std::string::npos)
      << "ps:0's forwarded pushes are not counted: " << page;
  const absl::Time killed = absl::Now();
  if (fault == Fault::kCut) {
    ASSERT_TRUE(partition->Cut().ok());
  } else {
    ASSERT_TRUE(ps0->Kill(fault == Fault::kKill ? SIGKILL : SIGSTOP));
  }
  const std::string failover = chief->WaitForMatch("failover: ps:0 is gone.* resumed at step [0-9]+", absl::Minutes(1));
  ASSERT_FALSE(failover.empty());
  std::cerr << "\nFIGURE: PS " << (fault == Fault::kKill ? "SIGKILL" : fault == Fault::kStop ? "SIGSTOP" : "cut off")
            << " -> chief's failover done, workers resumed on the promoted backup: "
            << absl::ToDoubleSeconds(absl::Now() - killed) << " s (failover_after_ms 200)\n";
  health = chief_client.JobStatus();
  ASSERT_TRUE(health.ok()) << health.status();
  ASSERT_EQ(health->replica_size(), 2) << health->DebugString();
  for (int store = 0; store < 2; ++store) {
    EXPECT_EQ(health->replica(store).primary(), "ps:1") << "store " << store;
    EXPECT_EQ(health->replica(store).backup(), "") << "store " << store;
    EXPECT_EQ(health->replica(store).state(), JobStatusResponse::Replica::UNREPLICATED) << "store " << store;
    EXPECT_GT(health->replica(store).epoch(), before->epoch()) << "store " << store;
  }
  EXPECT_EQ(health->failovers(), 1);
  page = metrics();
  EXPECT_NE(page.find("psrt_ps_store_role{task=\"ps:1\",store=\"0\",role=\"primary\"} 1\n"), std::string::npos)
      << "the promoted store: " << page;
  const bool split_brain = fault != Fault::kKill;
  if (split_brain) {
    // Training goes on while ps:0 is still stopped or cut off: nothing
    // waits on it (the workers cancelled their calls to it, the new epoch
    // ended ps:1's forwards to it).
    const int64_t resumed = static_cast<int64_t>(testing::SummaryNumber(failover, "resumed at step ([0-9]+)"));
    ASSERT_TRUE(WaitForChiefStep(chief.get(), resumed + 100, chief->lines(), absl::Minutes(1)))
        << "training did not go on past step " << resumed + 100 << " without ps:0";
    ASSERT_TRUE(fault == Fault::kCut ? partition->Heal().ok() : ps0->Kill(SIGCONT));
    // Back with its old state and epoch: nothing it is sent at that epoch
    // is acknowledged, before or after the chief rebuilds it...
    ExpectOldPrimaryAcknowledgesNothing(before->epoch(), before->generation());
    // ...from the copies that served meanwhile.
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
  // store 0 it took over) applied one push per worker step; the pushes of
  // ExpectOldPrimaryAcknowledgesNothing left no trace.
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
  if (split_brain) {
    // The old primary, rebuilt, is store 0's primary again at the current
    // epoch, and its copy applied every push too (and store 1's backup); a
    // channel of its own: the one from before a cut may still back off.
    EXPECT_EQ(Field(summary, "rebuilds"), 1) << summary;
    ChannelCache fresh;
    PsAdmin old(fresh.Get(cluster_.ps[0]), "ps:0");
    auto st_old = old.Status();
    ASSERT_TRUE(st_old.ok()) << st_old.status();
    EXPECT_GT(st_old->epoch(), before->epoch());
    EXPECT_EQ(st_old->epoch(), st->epoch());
    EXPECT_EQ(st_old->global_step(), 2 * kSteps) << "store 0, rebuilt on ps:0";
    PsAdmin backup1(fresh.Get(cluster_.ps[0]), "ps:0");
    backup1.SetReplica(1, st->epoch());
    auto st_b1 = backup1.Status();
    ASSERT_TRUE(st_b1.ok()) << st_b1.status();
    EXPECT_EQ(st_b1->global_step(), 2 * kSteps) << "store 1's backup, rebuilt on ps:0";
  }
}

bool ReplicatedCluster::WaitForChiefStep(Daemon* chief, int64_t step, size_t from, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const std::string line = chief->WaitForMatch("step [0-9]+/[0-9]+ ", deadline - absl::Now(), from);
    if (line.empty()) return false;
    from = chief->lines();
    if (testing::SummaryNumber(line, "step ([0-9]+)/") >= step) return true;
  }
  return false;
}

void ReplicatedCluster::ExpectOldPrimaryAcknowledgesNothing(int64_t old_epoch, int64_t generation) {
  absl::StatusOr<JobPlan> plan = PlanJob(job_, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ChannelCache channels;
  for (int store = 0; store < 2; ++store) {
    // The variables of `store`, and a zero gradient for each.
    PlacementMap placement;
    TensorMap zeros;
    for (const VariablePlacement& vp : plan->placement.variable()) {
      if (vp.shard_size() != 1 || vp.shard(0).ps_task() != store) continue;
      *placement.add_variable() = vp;
      auto shape = TensorShape::FromProto(vp.variable().shape());
      ASSERT_TRUE(shape.ok()) << shape.status();
      zeros[vp.variable().name()] = Tensor::FromVector<float>(std::vector<float>(shape->num_elements(), 0.f), *shape);
    }
    ASSERT_FALSE(zeros.empty()) << "store " << store << " holds no variable";
    RequestId id;
    id.set_worker(0);
    id.set_worker_incarnation(0xdead0000 + store);  // no worker's: never a duplicate
    id.set_step(1000000);
    id.set_generation(generation);
    PsClientOptions o;
    o.timeout = absl::Seconds(20);
    // Store 0 to its old primary and to its new one; store 1 to its own.
    for (int serving : store == 0 ? std::vector<int>{0, 1} : std::vector<int>{1}) {
      PsClient client(placement, cluster_.ps, &channels, o);
      ReplicaRoute old_route;
      old_route.set_epoch(old_epoch);
      old_route.add_store_task(store == 0 ? serving : 0);
      old_route.add_store_task(1);
      client.SetRoute(old_route);
      absl::Status s = client.Push(id, zeros, {});
      // Joined again after a cut, ps:0's channel to ps:1 may still be
      // backing off: its forward fails unsent (not acknowledged either)
      // until it reconnects. The retry has the same request id.
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      while (serving == 0 && s.code() == absl::StatusCode::kUnavailable &&
             !absl::StrContains(s.message(), "refused") && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(100));
        s = client.Push(id, zeros, {});
      }
      SCOPED_TRACE(absl::StrCat("store ", store, " pushed to ps:", serving, " at the old epoch: ", s.ToString()));
      if (store == 0 && serving == 0 && s.code() == absl::StatusCode::kUnavailable) {
        // The old primary, not rebuilt yet, still takes it for its own copy,
        // but its forward to ps:1 (store 0's primary now) is refused: not
        // acknowledged. Once rebuilt it refuses the old epoch itself (below).
        EXPECT_THAT(std::string(s.message()), HasSubstr("not acknowledged"));
        EXPECT_THAT(std::string(s.message()), HasSubstr("refused"));
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("placement epoch ", old_epoch, " refused")));
      }
    }
  }
}

}  // namespace
}  // namespace psrt
