// The PS daemon as a real process on a real socket: the worker's client
// against it in ASYNC and SYNC (two concurrent workers), bad input refused
// over the wire, and a SIGKILL during a background snapshot after which a
// restore takes the previous complete snapshot, never the partial one.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "chief/cluster_clients.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "common/snapshot/snapshot_testing.h"
#include "common/transport/ps_client.h"
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
                                     "--cluster_spec=" + cluster.spec_path, "--task=ps:0",
                                     absl::StrCat("--snapshot_dir=", std::getenv("TEST_TMPDIR"))};
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

// What a PS answers is checked against the placement before the client
// copies a byte: an answer of the wrong size is DATA_LOSS, not an overflow.
TEST(PsServerTest, AnAnswerThatDoesNotFitThePlacementIsRefused) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "misfit");
  ps.Start();
  ps.Create("ASYNC", 1);  // w is float32[4] on the PS
  PlacementMap placement;
  VariablePlacement* vp = placement.add_variable();
  vp->mutable_variable()->set_name("w");
  vp->mutable_variable()->mutable_shape()->add_dim(2);  // the worker expects [2]
  vp->add_shard()->set_ps_task(0);
  PsClient client(placement, ps.cluster.ps, &ps.channels, PsClientOptions());
  auto w = client.Pull({"w"}, 0);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status();
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("ps:0 answered w with float32[4], not its 8 bytes"));
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

// A PS of one ASYNC variable w, one push (w = -1), a durable snapshot of
// step 1 in `dir`, then SIGKILL.
void SnapshotOneStepThenKill(Ps* ps, const std::string& name, const std::string& dir) {
  ps->cluster = *testing::MakeTestCluster(1, 1, name);
  ps->Start();
  ps->Create("ASYNC", 1);
  auto client = ps->Client(0);
  ASSERT_TRUE(client->Push(Id(0, 0), Grad(2), {}).ok());  // w = -1
  ASSERT_TRUE(ps->admin->Snapshot(1, dir, /*wait_durable=*/true, 3).ok());
  ps->daemon->Kill(SIGKILL);
  ASSERT_TRUE(ps->daemon->Wait(absl::Seconds(30)).ok());
}

TEST(PsServerTest, KilledDuringABackgroundSnapshotRestoresThePreviousOne) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ckpt";
  Ps ps;
  ASSERT_NO_FATAL_FAILURE(SnapshotOneStepThenKill(&ps, "kill", dir));

  // A second life that stalls inside its next snapshot write, then dies.
  ps.Start({"--fault_pause_snapshot_after_chunks=1"});
  ps.Create("ASYNC", 1);
  RestoreRequest r1;
  ASSERT_TRUE(ps.admin->Restore(1, dir).ok());
  auto client = ps.Client(0);
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

// The store directory of checkpoint `name` (its last path component) under
// the PS's --snapshot_dir, TEST_TMPDIR.
std::string StoreDirOf(const std::string& name) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::getenv("TEST_TMPDIR"))) {
    if (e.is_directory() && e.path().filename() == "ps-0" && e.path().parent_path().filename() == name) {
      return e.path().string();
    }
  }
  return "";
}

// A "kB" figure of /proc/PID/status ("VmRSS:", "VmHWM:"); -1 if absent.
int64_t ProcStatusKb(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + field.size());
  }
  return -1;
}
int64_t PeakRssKb(pid_t pid) { return ProcStatusKb(pid, "VmHWM:"); }

// An index (its checksum valid) naming w as 1 GiB in a sparse data file of
// that size: every check against the file passes, and the PS used to
// allocate and read it all before finding the checksum wrong. Now the
// restore refuses it against the PS's own w (float32[4]) before allocating:
// FAILED_PRECONDITION naming both shapes, the PS's peak memory unmoved, and
// nothing changed.
TEST(PsServerTest, ARestoreNamingMoreThanTheVariableIsRefusedBeforeAllocating) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/huge";
  Ps ps;
  ASSERT_NO_FATAL_FAILURE(SnapshotOneStepThenKill(&ps, "huge", dir));

  const std::string store = StoreDirOf("huge");
  ASSERT_FALSE(store.empty());
  auto file = testing::SnapshotDataFile(store, 1);
  ASSERT_TRUE(file.ok()) << file.status();
  constexpr int64_t kHuge = int64_t{1} << 30;
  ASSERT_EQ(::truncate(file->c_str(), kHuge + 4096), 0);
  absl::Status edited = testing::EditSnapshotIndex(store, 1, [&](SnapshotIndex* index) {
    for (SnapshotVariable& v : *index->mutable_variable()) {
      if (v.def().name() != "w") continue;
      v.mutable_value()->mutable_shape()->set_dim(0, kHuge / 4);
      v.mutable_value()->set_bytes(kHuge);
      v.mutable_value()->set_offset(4096);
    }
    index->set_data_bytes(kHuge + 4096);
  });
  ASSERT_TRUE(edited.ok()) << edited;

  ps.Start();
  ps.Create("ASYNC", 1);
  const int64_t before_kb = PeakRssKb(ps.daemon->process()->pid());
  auto restored = ps.admin->Restore(1, dir);
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kFailedPrecondition) << restored.status();
  EXPECT_THAT(std::string(restored.status().message()),
              HasSubstr("variable w: the checkpoint holds float32[268435456] (DENSE), the job's variable is "
                        "float32[4] (DENSE): more rows than the variable has"));
  const int64_t after_kb = PeakRssKb(ps.daemon->process()->pid());
  std::cout << "PS peak RSS before the restore " << before_kb << " kB, after " << after_kb << " kB\n";
  EXPECT_LT(after_kb - before_kb, 256 * 1024) << "the restore allocated the tensor the index named";
  auto client = ps.Client(0);
  EXPECT_FLOAT_EQ(W0(client.get()), 0.0f);  // nothing changed
  EXPECT_TRUE(ps.admin->Status().ok());
}

namespace limits {

int64_t RssKb(pid_t pid) { return ProcStatusKb(pid, "VmRSS:"); }

absl::Status CreateOne(PsAdmin* admin, const std::string& text) {
  CreateVariablesRequest req;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      text + " optimizer { sgd { learning_rate: 0.5 } } num_workers: 2 consistency { mode: SYNC }", &req));
  return admin->CreateVariables(req).status();
}

Tensor Ids(int64_t first, int64_t n) {
  Tensor t(DT_INT64, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = first + i;
  return t;
}

}  // namespace limits

// Every limit refuses with RESOURCE_EXHAUSTED, names its flag, and leaves the
// PS as it was.
// Whether every thread of `pid` has stopped (kill returns before they have:
// a call can still be served in between). Polls /proc up to `timeout`.
bool WaitStopped(pid_t pid, absl::Duration timeout) {
  auto stopped = [](const std::string& stat_path) {
    std::ifstream stat(stat_path);
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // the state follows the command name
    return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
  };
  for (absl::Time end = absl::Now() + timeout; absl::Now() < end; absl::SleepFor(absl::Milliseconds(2))) {
    bool all = true;
    for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
      all = all && stopped(task.path().string() + "/stat");
    }
    if (all) return true;
  }
  return false;
}

// Pushes and pulls travel as frames of one connection per PS: a TCP
// connection to the PS's data plane (the default) or a gRPC stream. A PS
// that stops (SIGSTOP) makes the calls on the open connection
// DEADLINE_EXCEEDED at the client's deadline, and the connection serves
// again once it resumes; a PS killed in the middle of the open connection
// fails its calls promptly with UNAVAILABLE, and once it is back (on
// another data port) the same client opens a new connection.
class FramedTransportTest : public ::testing::TestWithParam<PsTransport> {};

TEST_P(FramedTransportTest, AConnectionSurvivesAStoppedPsAndReopensAfterAKilledOne) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "stream");
  ps.Start();
  ps.Create("ASYNC", 1);
  PlacementMap placement;
  placement.add_variable()->mutable_variable()->set_name("w");
  placement.mutable_variable(0)->add_shard()->set_ps_task(0);
  PsClientOptions quick;
  quick.timeout = absl::Seconds(2);
  ASSERT_EQ(PsClientOptions().transport, PsTransport::kTcp);  // the default
  quick.transport = GetParam();
  PsClient client(placement, ps.cluster.ps, &ps.channels, quick);
  ASSERT_TRUE(client.Push(Id(0, 0), Grad(2), {}).ok());
  EXPECT_FLOAT_EQ(W0(&client), -1.0f);

  const pid_t pid = ps.daemon->process()->pid();
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(WaitStopped(pid, absl::Seconds(10)));
  absl::Time start = absl::Now();
  absl::Status stopped = client.Push(Id(0, 1), Grad(2), {});
  EXPECT_EQ(stopped.code(), absl::StatusCode::kDeadlineExceeded) << stopped;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  // The push may have been applied when the PS woke up; its retry, with the
  // same id, is applied at most once, exactly as after a unary deadline.
  ASSERT_TRUE(client.Push(Id(0, 1), Grad(2), {}).ok());
  EXPECT_FLOAT_EQ(W0(&client), -2.0f);

  ps.daemon->Kill(SIGKILL);
  start = absl::Now();
  absl::Status killed = client.Push(Id(0, 2), Grad(2), {});
  EXPECT_EQ(killed.code(), absl::StatusCode::kUnavailable) << killed;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "a dead PS's stream must fail fast, not at the deadline";
  ASSERT_TRUE(ps.daemon->Wait(absl::Seconds(30)).ok());

  ps.Start();  // the same address
  ps.Create("ASYNC", 1);
  absl::Status again;
  for (absl::Time end = absl::Now() + absl::Seconds(20); absl::Now() < end;) {
    again = client.Push(Id(0, 3), Grad(2), {});
    if (again.code() != absl::StatusCode::kUnavailable) break;  // until the channel reconnects
  }
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_FLOAT_EQ(W0(&client), -1.0f);  // a fresh PS: one push of 2 x 0.5
}

INSTANTIATE_TEST_SUITE_P(Transports, FramedTransportTest,
                         ::testing::Values(PsTransport::kTcp, PsTransport::kStream),
                         [](const ::testing::TestParamInfo<PsTransport>& p) {
                           return p.param == PsTransport::kTcp ? std::string("Tcp") : std::string("Stream");
                         });

TEST(PsServerTest, LimitsRefuseWithResourceExhaustedAndChangeNothing) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "limits");
  ps.Start({"--max_variables=3", "--max_memory_mb=1", "--max_hash_table_rows=50",
            "--max_rows_per_request=100", "--max_inflight_requests=4"});
  ps.Create("SYNC", 2);  // w and emb
  auto status = [&] { return *ps.admin->Status(); };

  absl::Status two_more = limits::CreateOne(ps.admin.get(), R"(
      variable { name: "a" dtype: DT_FLOAT shape { dim: 1 } initializer { kind: ZEROS } }
      variable { name: "b" dtype: DT_FLOAT shape { dim: 1 } initializer { kind: ZEROS } })");
  EXPECT_EQ(two_more.code(), absl::StatusCode::kResourceExhausted) << two_more;
  EXPECT_THAT(std::string(two_more.message()), HasSubstr("--max_variables"));
  EXPECT_EQ(status().variables(), 2);  // neither was made

  absl::Status huge = limits::CreateOne(ps.admin.get(), R"(
      variable { name: "big" dtype: DT_FLOAT shape { dim: 1048576 } initializer { kind: ZEROS } })");
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
  EXPECT_THAT(std::string(huge.message()), HasSubstr("--max_memory_mb"));
  absl::Status absurd = limits::CreateOne(ps.admin.get(), R"(
      variable { name: "big" dtype: DT_FLOAT shape { dim: 1048576 dim: 1048576 } initializer { kind: ZEROS } })");
  EXPECT_EQ(absurd.code(), absl::StatusCode::kResourceExhausted) << absurd;
  EXPECT_EQ(status().variables(), 2);

  auto client = ps.Client(0);
  auto too_many_rows = client->PullRows({{"emb", limits::Ids(0, 101)}}, 0);
  EXPECT_EQ(too_many_rows.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(client->PullRows({{"emb", limits::Ids(0, 40)}}, 0).ok());
  auto table_full = client->PullRows({{"emb", limits::Ids(30, 20)}}, 0);  // 10 new: 50 rows, fits
  ASSERT_TRUE(table_full.ok()) << table_full.status();
  auto over = client->PullRows({{"emb", limits::Ids(1000, 1)}}, 0);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("--max_hash_table_rows"));
  Tensor grads(DT_FLOAT, TensorShape({3, 2}));
  grads.flat<float>().setConstant(1);
  absl::Status push_new = client->Push(Id(0, 0), {}, {{"emb", {limits::Ids(48, 3), grads}}});
  EXPECT_EQ(push_new.code(), absl::StatusCode::kResourceExhausted) << push_new;
  EXPECT_EQ(status().rows(), 50);
  auto known = client->PullRows({{"emb", limits::Ids(48, 2)}}, 0);
  ASSERT_TRUE(known.ok());
  EXPECT_FLOAT_EQ(known->at("emb").data<float>()[0], 0.0f);  // the refused push changed nothing

  // SYNC pulls of step 1 park until both workers pushed step 0: four fill
  // the PS's in-flight slots, the next is refused at once.
  std::vector<std::thread> parked;
  std::vector<absl::Status> parked_status(4);
  for (int i = 0; i < 4; ++i) {
    parked.emplace_back([&, i] {
      // Until it gets a slot: the probe below may hold one for a moment.
      absl::Time end = absl::Now() + absl::Seconds(30);
      do {
        parked_status[i] = ps.Client(0)->Pull({"w"}, 1).status();
      } while (parked_status[i].code() == absl::StatusCode::kResourceExhausted && absl::Now() < end);
    });
  }
  PsClientOptions quick;
  quick.timeout = absl::Milliseconds(300);
  PlacementMap w_only;
  w_only.add_variable()->mutable_variable()->set_name("w");
  w_only.mutable_variable(0)->add_shard()->set_ps_task(0);
  PsClient probe(w_only, ps.cluster.ps, &ps.channels, quick);
  absl::Status refused;
  for (absl::Time end = absl::Now() + absl::Seconds(30); absl::Now() < end;) {
    // Parks (and times out) until the four are in; refused means all four
    // slots are held by them, since the probe holds none then.
    refused = probe.Pull({"w"}, 1).status();
    if (refused.code() == absl::StatusCode::kResourceExhausted) break;
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--max_inflight_requests"));
  ASSERT_TRUE(ps.Client(0)->Push(Id(0, 0), Grad(1), {}).ok());
  ASSERT_TRUE(ps.Client(1)->Push(Id(1, 0), Grad(1), {}).ok());
  for (auto& t : parked) t.join();
  for (const absl::Status& s : parked_status) EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(probe.Pull({"w"}, 1).ok());  // the slots are free again
}

// Issue #17: --max_inflight_requests is the PS's; --max_inflight_per_caller
// keeps one caller from taking all of it. Issue #28: a caller is who it is
// (its certificate's task, else its token and its connection), never the
// worker id its requests name. One client claiming worker 0 parks SYNC
// pulls until it holds its share and is refused, naming the flag and
// itself; another client claiming worker 0 too (the real one) is served,
// and so is worker 1. --max_pull_response_mb refuses a pull whose answer
// is larger, naming it.
TEST(PsServerTest, OneFloodingCallerDoesNotStarveAnother) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "per_caller");
  ps.Start({"--max_inflight_requests=8", "--max_inflight_per_caller=3", "--max_pull_response_mb=1"});
  ps.Create("SYNC", 2);
  PlacementMap w_only;
  w_only.add_variable()->mutable_variable()->set_name("w");
  w_only.mutable_variable(0)->add_shard()->set_ps_task(0);
  PsClientOptions quick;
  quick.worker = 0;
  quick.timeout = absl::Seconds(2);
  PsClient flooder(w_only, ps.cluster.ps, &ps.channels, quick);  // one connection
  std::vector<std::thread> flood;
  std::vector<absl::Status> flood_status(3);
  for (int i = 0; i < 3; ++i) {
    flood.emplace_back([&, i] {
      absl::Time end = absl::Now() + absl::Seconds(30);
      do {  // parked until step 0 is pushed; pulled again while refused or timed out
        flood_status[i] = flooder.Pull({"w"}, 1).status();
      } while (!flood_status[i].ok() && absl::Now() < end);
    });
  }
  absl::Status refused;
  for (absl::Time end = absl::Now() + absl::Seconds(30); absl::Now() < end;) {
    refused = flooder.Pull({"w"}, 1).status();  // parks and times out until the 3 hold the flooder's share
    if (refused.code() == absl::StatusCode::kResourceExhausted) break;
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--max_inflight_per_caller"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("from data-plane connection 127.0.0.1:"));
  // The real worker 0, on its own connection, and worker 1 are served: the
  // flooder's claim of "worker 0" spent only its own share.
  PsClient real0(w_only, ps.cluster.ps, &ps.channels, quick);
  EXPECT_EQ(W0(&real0, 0), 0.0f);
  auto other = ps.Client(1);
  EXPECT_EQ(W0(other.get(), 0), 0.0f);
  ASSERT_TRUE(other->Push(Id(1, 0), Grad(1), {}).ok());
  ASSERT_TRUE(ps.Client(0)->Push(Id(0, 0), Grad(1), {}).ok());
  for (auto& t : flood) t.join();
  for (const absl::Status& s : flood_status) EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(flooder.Pull({"w"}, 1).ok());  // the flooder's slots are free again

  absl::Status big = limits::CreateOne(ps.admin.get(), R"(
      variable { name: "big" dtype: DT_FLOAT shape { dim: 300000 } initializer { kind: ZEROS } })");
  ASSERT_TRUE(big.ok()) << big;
  auto pulled = ps.admin->Pull({"big"}, 0);
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kResourceExhausted) << pulled.status();
  EXPECT_THAT(std::string(pulled.status().message()), HasSubstr("--max_pull_response_mb"));
  EXPECT_THAT(std::string(pulled.status().message()), HasSubstr("1200000 bytes"));
  EXPECT_TRUE(ps.admin->Pull({"w"}, 0).ok());
}

namespace limits {

int64_t StatusKb(pid_t pid, const char* field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::strlen(field));
  }
  return -1;
}

}  // namespace limits

// Issue #17: memory per request is a small multiple of its size. The PS's
// peak RSS (VmHWM, reset through /proc/PID/clear_refs) while it takes one
// 64 MiB push stays within 3x the push above what it held before.
TEST(PsServerTest, APushCostsASmallMultipleOfItsSize) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "push_memory");
  ps.Start({"--max_request_mb=80"});
  constexpr int64_t kFloats = 16 << 20;  // 64 MiB
  CreateVariablesRequest req;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(absl::StrCat(R"(
      variable { name: "w" dtype: DT_FLOAT shape { dim: )", kFloats, R"( } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 0.001 } } num_workers: 1)"), &req));
  ASSERT_TRUE(ps.admin->CreateVariables(req).ok());
  PlacementMap placement;
  placement.add_variable()->mutable_variable()->set_name("w");
  placement.mutable_variable(0)->add_shard()->set_ps_task(0);
  PsClient client(placement, ps.cluster.ps, &ps.channels, PsClientOptions());
  Tensor grad(DT_FLOAT, TensorShape({kFloats}));
  grad.flat<float>().setConstant(1);
  const pid_t pid = ps.daemon->process()->pid();
  const int64_t push_kb = kFloats * 4 / 1024;
  // The first push (buffers and pools made) and the second (reused).
  for (int64_t step : {0, 1}) {
    {
      std::ofstream clear(absl::StrCat("/proc/", pid, "/clear_refs"));
      clear << "5" << std::flush;
      if (!clear) GTEST_SKIP() << "cannot reset the peak RSS through /proc/" << pid << "/clear_refs";
    }
    const int64_t before_kb = limits::StatusKb(pid, "VmRSS:");
    ASSERT_TRUE(client.Push(Id(0, step), {{"w", grad}}, {}).ok());
    const int64_t peak_kb = limits::StatusKb(pid, "VmHWM:");
    std::cout << "FIGURE: push " << step << " of " << push_kb << " KiB: PS RSS " << before_kb
              << " KiB before, peak " << peak_kb << " KiB ("
              << static_cast<double>(peak_kb - before_kb) / push_kb << "x the push)" << std::endl;
    ASSERT_GT(before_kb, 0);
    EXPECT_LE(peak_kb - before_kb, 3 * push_kb) << "push " << step;
  }
}

// Many clients pushing as fast as they can: the PS serves what its limits
// allow, refuses the rest, and its memory stays within a bound set by
// those limits (streams x request size), not by the number of requests.
// A PS started with no flags at all refuses what would not fit the machine
// (a float [2^40, 256] used to abort it in the allocator) and lives on.
TEST(PsServerTest, WithNoFlagsAVariableLargerThanTheMachineIsRefused) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "no_flags");
  ps.Start();
  absl::Status huge = limits::CreateOne(ps.admin.get(), R"(
      variable { name: "huge" dtype: DT_FLOAT shape { dim: 1099511627776 dim: 256 } initializer { kind: ZEROS } })");
  EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
  EXPECT_THAT(std::string(huge.message()), HasSubstr("--max_memory_mb"));
  auto st = ps.admin->Status();
  ASSERT_TRUE(st.ok()) << st.status();  // alive
  EXPECT_EQ(st->variables(), 0);
}

TEST(PsServerTest, FloodOfPushesKeepsMemoryBounded) {
  Ps ps;
  ps.cluster = *testing::MakeTestCluster(1, 1, "flood");
  ps.Start({"--max_inflight_requests=8", "--max_concurrent_streams=8", "--max_request_mb=2"});
  CreateVariablesRequest req;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
      variable { name: "w" dtype: DT_FLOAT shape { dim: 262144 } initializer { kind: ZEROS } }
      optimizer { sgd { learning_rate: 0.001 } } num_workers: 1)", &req));
  ASSERT_TRUE(ps.admin->CreateVariables(req).ok());
  PlacementMap placement;
  placement.add_variable()->mutable_variable()->set_name("w");
  placement.mutable_variable(0)->add_shard()->set_ps_task(0);
  Tensor grad(DT_FLOAT, TensorShape({262144}));  // 1 MiB per push
  grad.flat<float>().setConstant(1);

  auto flood = [&](absl::Duration d, std::atomic<int64_t>* ok, std::atomic<int64_t>* refused) {
    const absl::Time stop = absl::Now() + d;
    std::vector<std::thread> threads;
    for (int t = 0; t < 32; ++t) {
      threads.emplace_back([&, t] {
        ChannelCache own;  // a connection per client, as separate workers have
        PsClient c(placement, ps.cluster.ps, &own, PsClientOptions());
        for (int64_t i = 0; absl::Now() < stop; ++i) {
          absl::Status s = c.Push(Id(0, (t + 1) * 10000000 + i), {{"w", grad}}, {});
          (s.ok() ? ok : refused)->fetch_add(1);
        }
      });
    }
    for (auto& th : threads) th.join();
  };
  std::atomic<int64_t> ok{0}, refused{0};
  flood(absl::Seconds(2), &ok, &refused);  // warm up: buffers and pools reach their size
  const int64_t warm_kb = limits::RssKb(ps.daemon->process()->pid());
  flood(absl::Seconds(6), &ok, &refused);
  const int64_t end_kb = limits::RssKb(ps.daemon->process()->pid());
  std::cout << "flood: " << ok << " pushes served, " << refused << " refused; PS RSS " << warm_kb
            << " KiB after warm-up, " << end_kb << " KiB at the end" << std::endl;
  EXPECT_GT(ok.load(), 100);
  // 32 connections x 8 streams x 1 MiB could be queued at once; the bound
  // allows that plus slack, while unbounded growth (every push kept) would
  // pass it within the first second.
  EXPECT_LT(end_kb - warm_kb, 320 * 1024) << "RSS grew from " << warm_kb << " to " << end_kb << " KiB";
  auto st = ps.admin->Status();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state(), STATE_SERVING);
}

}  // namespace
}  // namespace psrt
