// The control plane against a hostile client, with real daemons (chief, one
// PS, one worker) on real sockets, in plain text as the launcher runs them:
//
//  - Unparsable bytes to every method of every service are refused with
//    INVALID_ARGUMENT naming the method (generated handlers answered
//    UNIMPLEMENTED or INTERNAL).
//  - A soak (issue #17): random bytes and mutated valid requests (fields
//    flipped, extreme numbers, long and repeated names) to every method,
//    200 calls in flight for a bounded time; afterwards every daemon is alive
//    and answering, its RSS within 1.5x + 80 MB of what it was before and
//    within 1.1x + 20 MB of what it was halfway (where a leak would show).
//    It prints the RSS and the calls by status code as FIGURE: lines.
//
//   bazel test //tests:control_soak_test                         (~1 minute)
//   bazel test //tests:control_soak_test --test_output=streamed
//       --test_env=PSRT_CONTROL_SOAK_SECONDS=600 --test_timeout=900   (longer)
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/plan/job_planner.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/chief_service.pb.h"
#include "proto/ps_service.pb.h"
#include "proto/worker_service.pb.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;
using testing::Daemon;

enum Target { kChief = 0, kPs = 1, kWorker = 2 };

struct Method {
  Target target;
  std::string path;
  bool data_path;  // decoded by ps_wire.h, not protobuf
};

const std::vector<Method>& AllMethods() {
  static const auto* methods = new std::vector<Method>{
      {kChief, "/psrt.Chief/Register", false},          {kChief, "/psrt.Chief/Heartbeat", false},
      {kChief, "/psrt.Chief/ReportFailure", false},     {kChief, "/psrt.Chief/JobStatus", false},
      {kPs, "/psrt.ParameterServer/CreateVariables", false}, {kPs, "/psrt.ParameterServer/Pull", true},
      {kPs, "/psrt.ParameterServer/Push", true},        {kPs, "/psrt.ParameterServer/PullRows", true},
      {kPs, "/psrt.ParameterServer/PushRows", true},    {kPs, "/psrt.ParameterServer/Snapshot", false},
      {kPs, "/psrt.ParameterServer/Restore", false},    {kPs, "/psrt.ParameterServer/Status", false},
      {kWorker, "/psrt.Worker/Start", false},           {kWorker, "/psrt.Worker/Pause", false},
      {kWorker, "/psrt.Worker/Resume", false},          {kWorker, "/psrt.Worker/Status", false},
      {kWorker, "/psrt.Worker/Shutdown", false}};
  return *methods;
}

// Bytes no protobuf parser accepts: a varint of eleven continuation bytes.
std::string Unparsable() { return std::string(11, '\xff'); }

std::shared_ptr<grpc::Channel> Channel(const std::string& address, int connection) {
  grpc::ChannelArguments args;
  args.SetInt("psrt.connection", connection);  // distinct args: a connection each
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::string Flatten(const grpc::ByteBuffer& bb);

// One call of `method` with `bytes`; `done` runs with its status.
void CallAsync(grpc::GenericStub* stub, const std::string& method, const std::string& bytes,
               absl::Duration timeout, std::function<void(grpc::Status, const std::string&)> done) {
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
  };
  // Owned by the callback, which deletes it as it ends: a context captured
  // in the callback object itself died with gRPC's call arena (a refcount
  // assertion in grpc's ref_counted.h).
  Call* call = new Call;
  call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice slice(bytes);
  call->request = grpc::ByteBuffer(&slice, 1);
  stub->UnaryCall(&call->ctx, method, grpc::StubOptions(), &call->request, &call->response,
                  [call, done = std::move(done)](grpc::Status s) {
                    // The call is gone before `done` runs: whoever waits on
                    // it may then drop the stub and channel.
                    std::string response = Flatten(call->response);
                    delete call;
                    done(std::move(s), response);
                  });
}

grpc::Status CallSync(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& bytes, absl::Duration timeout = absl::Seconds(10),
                      std::string* response = nullptr) {
  // A completion queue, not a callback: the call, its context, the stub and
  // the channel all end on this thread, in order. (With a callback, the
  // channel could die here while gRPC was still finishing the call on its
  // own thread: "assertion failed: prior > 0" in ref_counted.h, about one
  // run in two.)
  grpc::CompletionQueue cq;
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), reply;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> rpc = stub.PrepareUnaryCall(&ctx, method, request, &cq);
  rpc->StartCall();
  rpc->Finish(&reply, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (response != nullptr) *response = Flatten(reply);
  return status;
}

using testing::RssKb;

std::string Flatten(const grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!bb.Dump(&slices).ok()) return out;
  for (const grpc::Slice& sl : slices) out.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return out;
}

// A valid request of each method, to mutate. Worker.Shutdown has none: a
// valid one would (rightly) stop the worker, so it only gets bytes that do
// not parse.
std::unique_ptr<google::protobuf::Message> Seed(const std::string& path) {
  auto parse = [](google::protobuf::Message* m, const std::string& text) {
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, m)) << text;
    return std::unique_ptr<google::protobuf::Message>(m);
  };
  const std::string tensor4 = R"(dtype: DT_FLOAT shape { dim: 4 } content: "\000\000\200?\000\000\200?\000\000\200?\000\000\200?")";
  const std::string id1 = R"(dtype: DT_INT64 shape { dim: 1 } content: "\007\000\000\000\000\000\000\000")";
  const std::string name = path.substr(path.rfind('/') + 1);
  if (path.find("Chief") != std::string::npos) {
    if (name == "Register") {
      return parse(new RegisterRequest, R"(task { task { job: "worker" index: 0 } address: "127.0.0.1:1" incarnation: 5 })");
    }
    if (name == "Heartbeat") return parse(new HeartbeatRequest, R"(task { job: "worker" index: 0 } incarnation: 5 step: 10 loss: 0.5)");
    if (name == "ReportFailure") {
      return parse(new ReportFailureRequest,
                   R"(reporter { job: "worker" index: 0 } failed { job: "ps" index: 0 } error: "soak" step: 3 reporter_incarnation: 5)");
    }
    return parse(new JobStatusRequest, "");
  }
  if (path.find("ParameterServer") != std::string::npos) {
    if (name == "CreateVariables") {
      return parse(new CreateVariablesRequest, R"(
          variable { name: "soak" dtype: DT_FLOAT shape { dim: 4 } initializer { kind: ZEROS } }
          variable { name: "soak_emb" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 4 } initializer { kind: ZEROS } }
          optimizer { sgd { learning_rate: 0.1 } } num_workers: 1)");
    }
    if (name == "Pull") return parse(new PullRequest, R"(variable: "soak" worker: 0 step: 0)");
    if (name == "Push") {
      return parse(new PushRequest, R"(id { worker: 0 worker_incarnation: 1 step: 1 } gradient { name: "soak" tensor { )" + tensor4 + " } }");
    }
    if (name == "PullRows") return parse(new PullRowsRequest, R"(rows { variable: "soak_emb" ids { )" + id1 + " } } worker: 0");
    if (name == "PushRows") {
      return parse(new PushRowsRequest, R"(id { worker: 0 worker_incarnation: 1 step: 1 } gradient { variable: "soak_emb" ids { )" + id1 +
                                            R"( } values { dtype: DT_FLOAT shape { dim: 1 dim: 4 } content: "0123456789abcdef" } })");
    }
    if (name == "Snapshot") return parse(new SnapshotRequest, R"(step: 1 checkpoint: "soak" keep: 2)");
    if (name == "Restore") return parse(new RestoreRequest, R"(step: 1 checkpoint: "soak")");
    return parse(new PsStatusRequest, "");
  }
  if (name == "Start") {
    return parse(new StartRequest, R"(assignment { num_shards: 1 start_step: 0 loss_node: "loss" ps { task { job: "ps" } address: "127.0.0.1:1" } })");
  }
  if (name == "Pause") return parse(new PauseRequest, "generation: 1");
  if (name == "Resume") return parse(new ResumeRequest, "start_step: 0 generation: 1");
  if (name == "Status") return parse(new WorkerStatusRequest, "");
  return nullptr;  // Shutdown
}

// One mutation of a random field: extreme numbers, NaN, hostile or long
// strings, repeated elements (repeated names), nested messages made.
void MutateField(google::protobuf::Message* m, std::mt19937_64& rng, int depth = 0) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  const google::protobuf::Reflection* r = m->GetReflection();
  if (d->field_count() == 0) return;
  const FieldDescriptor* f = d->field(rng() % d->field_count());
  static const int64_t kInts[] = {0, 1, -1, 2, 99, 1 << 20, int64_t{1} << 40, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN};
  const int64_t n = kInts[rng() % (sizeof(kInts) / sizeof(kInts[0]))];
  static const double kReals[] = {0, -1, 1e300, -1e300, std::numeric_limits<double>::quiet_NaN(),
                                  std::numeric_limits<double>::infinity()};
  const double x = kReals[rng() % 6];
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      rep ? r->AddInt32(m, f, static_cast<int32_t>(n)) : r->SetInt32(m, f, static_cast<int32_t>(n));
      break;
    case FieldDescriptor::CPPTYPE_INT64: rep ? r->AddInt64(m, f, n) : r->SetInt64(m, f, n); break;
    case FieldDescriptor::CPPTYPE_UINT32:
      rep ? r->AddUInt32(m, f, static_cast<uint32_t>(n)) : r->SetUInt32(m, f, static_cast<uint32_t>(n));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      rep ? r->AddUInt64(m, f, static_cast<uint64_t>(n)) : r->SetUInt64(m, f, static_cast<uint64_t>(n));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE: rep ? r->AddDouble(m, f, x) : r->SetDouble(m, f, x); break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      rep ? r->AddFloat(m, f, static_cast<float>(x)) : r->SetFloat(m, f, static_cast<float>(x));
      break;
    case FieldDescriptor::CPPTYPE_BOOL: rep ? r->AddBool(m, f, true) : r->SetBool(m, f, !r->GetBool(*m, f)); break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int v = static_cast<int>(rng() % 2 ? n : rng() % 8);
      rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      static const char* kTexts[] = {"", ".", "..", "../../etc", "/etc/passwd", "soak", "soak_emb", "w",
                                     "ckpt", "line\nFORGED line", "<script>x</script>", "worker"};
      std::string v = kTexts[rng() % (sizeof(kTexts) / sizeof(kTexts[0]))];
      if (rng() % 8 == 0) v = std::string(1 + rng() % 70000, 'a');
      if (f->type() == FieldDescriptor::TYPE_BYTES && rng() % 2) {
        v.resize(rng() % 256);
        for (char& c : v) c = static_cast<char>(rng());
      }
      if (rep) {
        const int times = 1 + static_cast<int>(rng() % 4);  // the same name again and again
        for (int i = 0; i < times; ++i) r->AddString(m, f, v);
      } else {
        r->SetString(m, f, v);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (depth > 4) break;
      if (!rep) {
        MutateField(r->MutableMessage(m, f), rng, depth + 1);
      } else if (r->FieldSize(*m, f) > 0 && rng() % 3 == 0) {
        const int times = 1 + static_cast<int>(rng() % 8);  // repeated elements
        for (int i = 0; i < times; ++i) r->AddMessage(m, f)->CopyFrom(r->GetRepeatedMessage(*m, f, 0));
      } else {
        MutateField(r->AddMessage(m, f), rng, depth + 1);
      }
      break;
  }
}

// The bytes of one hostile request to `path`: random bytes, or a valid
// request mutated (fields, then maybe its bytes).
std::string HostileRequest(const std::string& path, std::mt19937_64& rng) {
  std::unique_ptr<google::protobuf::Message> seed = Seed(path);
  std::string bytes;
  if (seed == nullptr || rng() % 4 == 0) {
    bytes.resize(rng() % 512);
    for (char& c : bytes) c = static_cast<char>(rng());
    if (seed == nullptr) bytes = Unparsable() + bytes;
    return bytes;
  }
  const int mutations = static_cast<int>(rng() % 4);
  for (int i = 0; i < mutations; ++i) MutateField(seed.get(), rng);
  seed->SerializeToString(&bytes);
  switch (rng() % 8) {
    case 0:  // a flipped byte
      if (!bytes.empty()) bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));
      break;
    case 1: bytes.resize(bytes.size() / 2); break;  // truncated
    case 2: bytes += bytes; break;                  // twice: repeated fields repeat
    default: break;
  }
  return bytes;
}

bool Alive(pid_t pid) { return ::kill(pid, 0) == 0; }

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  int64_t out;
  return v != nullptr && absl::SimpleAtoi(v, &out) ? out : fallback;
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name_);
    auto c = testing::MakeTestCluster(1, 1, name_);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *c;
    std::filesystem::create_directories(dir_);
    const std::string job_path = testing::WriteJobFile(testing::EndlessMlpJob(dir_ + "/ckpt"), dir_ + "/job.pbtxt");
    auto start = [&](const std::string& binary, const std::string& task, std::vector<std::string> extra) {
      std::vector<std::string> argv = {testing::RunfilePath(binary), "--cluster_spec=" + cluster_.spec_path,
                                       "--task=" + task};
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto d = Daemon::Start(task, argv);
      EXPECT_TRUE(d.ok()) << d.status();
      return d.ok() ? *std::move(d) : nullptr;
    };
    // Limits a hostile client cannot talk past: memory and snapshots here.
    // (Variables made by mutated CreateVariables grow the PS legitimately up
    // to --max_memory_mb: 16 MiB keeps that well inside the RSS bound; with
    // 64 it grew 47 -> 111 MB and stayed there over a 60 s run.)
    ps_ = start("ps/server", "ps:0", {"--max_memory_mb=16", "--snapshot_dir=" + dir_});
    worker_ = start("worker/main", "worker:0", {"--threads=1"});
    chief_ = start("chief/main", "chief:0", {"--job=" + job_path, "--threads=1", "--checkpoint_dir=" + dir_ + "/ckpt"});
    ASSERT_TRUE(chief_ && ps_ && worker_);
    for (auto* d : {chief_.get(), ps_.get(), worker_.get()}) {
      ASSERT_TRUE(d->WaitForLine("serving at", absl::Seconds(60)));
    }
  }

  const std::string& Address(Target t) const {
    return t == kChief ? cluster_.chief : t == kPs ? cluster_.ps[0] : cluster_.workers[0];
  }
  Daemon* DaemonOf(Target t) const { return t == kChief ? chief_.get() : t == kPs ? ps_.get() : worker_.get(); }

  // Until the worker has trained a step (at most a minute).
  void WaitForTraining() {
    for (absl::Time end = absl::Now() + absl::Seconds(60); absl::Now() < end;) {
      std::string bytes;
      grpc::Status s = CallSync(Channel(cluster_.chief, 0), "/psrt.Chief/JobStatus", "", absl::Seconds(5), &bytes);
      JobStatusResponse status;
      if (s.ok() && status.ParseFromString(bytes) && status.step() > 0) return;
      absl::SleepFor(absl::Milliseconds(200));  // between polls of the condition above
    }
  }

  // The worker's own word on where it is (state IDLE on no answer).
  WorkerStatusResponse WorkerStatus() {
    std::string bytes;
    WorkerStatusResponse st;
    if (!CallSync(Channel(cluster_.workers[0], 0), "/psrt.Worker/Status", "", absl::Seconds(10), &bytes).ok() ||
        !st.ParseFromString(bytes)) {
      st.Clear();
    }
    return st;
  }

  std::string name_, dir_;
  testing::TestCluster cluster_;
  std::unique_ptr<Daemon> chief_, ps_, worker_;
};

TEST_F(ControlPlaneTest, UnparsableRequestsAreInvalidArgumentNamingTheMethod) {
  for (const Method& m : AllMethods()) {
    grpc::Status s = CallSync(Channel(Address(m.target), 0), m.path, Unparsable());
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << m.path << ": " << s.error_message();
    const std::string name = m.path.substr(m.path.rfind('/') + 1);
    if (!m.data_path) {
      EXPECT_THAT(s.error_message(), HasSubstr(name + ": the request")) << m.path;
    }
  }
  // Every daemon still answers (an empty request is a valid Status request).
  for (const char* path : {"/psrt.Chief/JobStatus", "/psrt.ParameterServer/Status", "/psrt.Worker/Status"}) {
    Target t = std::string(path).find("Chief") != std::string::npos ? kChief
               : std::string(path).find("Parameter") != std::string::npos ? kPs : kWorker;
    grpc::Status s = CallSync(Channel(Address(t), 0), path, "");
    EXPECT_TRUE(s.ok()) << path << ": " << s.error_message();
  }
}

// Issue #17's soak: 200 hostile calls in flight to all 17 methods for
// PSRT_CONTROL_SOAK_SECONDS (20 by default); every daemon lives, answers,
// and keeps its memory.
TEST_F(ControlPlaneTest, SoakOfHostileRequestsLeavesEveryDaemonAliveWithFlatMemory) {
  constexpr int kInFlight = 200;
  constexpr int kConnections = 4;  // per daemon
  const absl::Duration soak = absl::Seconds(EnvInt("PSRT_CONTROL_SOAK_SECONDS", 20));
  WaitForTraining();  // training is under way before the soak starts
  std::map<Target, int64_t> before;
  for (Target t : {kChief, kPs, kWorker}) before[t] = RssKb(DaemonOf(t)->process()->pid());

  std::vector<std::vector<std::unique_ptr<grpc::GenericStub>>> stubs(3);
  for (Target t : {kChief, kPs, kWorker}) {
    for (int c = 0; c < kConnections; ++c) stubs[t].push_back(std::make_unique<grpc::GenericStub>(Channel(Address(t), c + 1)));
  }
  // Shared with the calls' callbacks, which may outlive this test's stack.
  struct Tally {
    absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    std::map<grpc::StatusCode, int64_t> by_code ABSL_GUARDED_BY(mu);
    std::map<Target, int64_t> by_daemon ABSL_GUARDED_BY(mu);
  };
  auto tally = std::make_shared<Tally>();
  std::mt19937_64 rng(EnvInt("PSRT_CONTROL_SOAK_SEED", 17));
  const absl::Time start = absl::Now(), end = start + soak;
  int64_t sent = 0;
  // The peak RSS of each half, sampled every 100 ms: the second half's must
  // not outgrow the first's as a leak would. (One sample halfway could land
  // where the worker had just dropped its data for a seek a hostile Resume
  // asked for, 103 MB, and the end where it had decoded it again, 339 MB:
  // a correct worker failed.)
  std::map<Target, int64_t> peak[2];
  const absl::Time halfway = start + soak / 2;
  absl::Notification sampled;
  std::thread sampler([&] {
    do {
      std::map<Target, int64_t>& p = peak[absl::Now() < halfway ? 0 : 1];
      for (Target t : {kChief, kPs, kWorker}) p[t] = std::max(p[t], RssKb(DaemonOf(t)->process()->pid()));
    } while (!sampled.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  });
  while (absl::Now() < end) {
    {
      absl::MutexLock lock(&tally->mu);
      auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally->mu) { return tally->in_flight < kInFlight; };
      tally->mu.AwaitWithTimeout(absl::Condition(&room), absl::Seconds(1));
      if (tally->in_flight >= kInFlight) continue;
      ++tally->in_flight;
    }
    const Method& m = AllMethods()[rng() % AllMethods().size()];
    std::string bytes = HostileRequest(m.path, rng);
    ++sent;
    CallAsync(stubs[m.target][rng() % kConnections].get(), m.path, bytes, absl::Seconds(3),
              [tally, target = m.target](grpc::Status s, const std::string&) {
                absl::MutexLock lock(&tally->mu);
                --tally->in_flight;
                ++tally->by_code[s.error_code()];
                ++tally->by_daemon[target];
              });
  }
  sampled.Notify();
  sampler.join();
  std::map<grpc::StatusCode, int64_t> by_code;
  std::map<Target, int64_t> by_daemon;
  {
    absl::MutexLock lock(&tally->mu);
    auto drained = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tally->mu) { return tally->in_flight == 0; };
    ASSERT_TRUE(tally->mu.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(60)))
        << tally->in_flight << " calls never ended";
    by_code = tally->by_code;
    by_daemon = tally->by_daemon;
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);

  std::string codes;
  const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
                          "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                          "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                          "UNAUTHENTICATED"};
  for (const auto& [code, n] : by_code) absl::StrAppend(&codes, " ", kNames[static_cast<int>(code) % 17], "=", n);
  std::cout << "FIGURE: control soak: " << sent << " hostile calls in " << secs << " s, " << kInFlight
            << " in flight (chief " << by_daemon[kChief] << ", ps " << by_daemon[kPs] << ", worker "
            << by_daemon[kWorker] << ")" << std::endl;
  std::cout << "FIGURE: control soak calls by status:" << codes << std::endl;

  // Every daemon alive and answering, its memory within a bound a leak of
  // the calls above would break (1.5x + 50 MB).
  const char* kStatus[] = {"/psrt.Chief/JobStatus", "/psrt.ParameterServer/Status", "/psrt.Worker/Status"};
  const char* kNamesOf[] = {"chief", "ps", "worker"};
  for (Target t : {kChief, kPs, kWorker}) {
    const pid_t pid = DaemonOf(t)->process()->pid();
    ASSERT_TRUE(Alive(pid)) << kNamesOf[t] << " died";
    grpc::Status s = CallSync(Channel(Address(t), 0), kStatus[t], "", absl::Seconds(10));
    EXPECT_TRUE(s.ok()) << kNamesOf[t] << " does not answer: " << s.error_message();
    const int64_t after = RssKb(pid);
    std::cout << "FIGURE: control soak RSS " << kNamesOf[t] << ": " << before[t] / 1024 << " MB before, peak "
              << peak[0][t] / 1024 << " MB in the first half, " << peak[1][t] / 1024 << " MB in the second, "
              << after / 1024 << " MB after" << std::endl;
    // Overall within 1.5x + 80 MB: the PS sizes its pools, RocksDB stores
    // and the variables hostile creates may make (--max_memory_mb) once, in
    // the first seconds (the same 45 -> 111 MB after 20 s and after 60 s).
    // A leak shows in the second half: its peak at most 1.1x + 20 MB the
    // first's, which a leak of 1 KB per call (over 10,000 calls a half)
    // breaks.
    EXPECT_LE(after, before[t] * 3 / 2 + 80 * 1024) << kNamesOf[t] << " grew from " << before[t] << " KiB";
    EXPECT_LE(peak[1][t], peak[0][t] * 11 / 10 + 20 * 1024)
        << kNamesOf[t] << " peaked at " << peak[1][t] << " KiB in the second half, " << peak[0][t] << " KiB in the first";
  }
  {
    std::string bytes;
    PsStatusResponse ps;
    if (CallSync(Channel(cluster_.ps[0], 0), "/psrt.ParameterServer/Status", "", absl::Seconds(10), &bytes).ok() &&
        ps.ParseFromString(bytes)) {
      std::cout << "FIGURE: control soak PS after: " << ps.variables() << " variables, " << ps.bytes() / 1024
                << " KiB of variables and slots, " << ps.rows() << " hash rows, " << ps.durable_snapshots_size()
                << " durable snapshots" << std::endl;
    }
  }
  EXPECT_GT(sent, 1000);
  EXPECT_GT(by_code[grpc::StatusCode::INVALID_ARGUMENT], 0);
  EXPECT_GT(by_code[grpc::StatusCode::OK], 0);
  EXPECT_EQ(by_code[grpc::StatusCode::UNIMPLEMENTED], 0);
}

// Pauses and Resumes that send the worker back to step 0 and far ahead,
// with Status calls in flight beside them (gRPC's threads come and go):
// each seek drops a stream's decoded data and decodes it again. Freed on
// one thread and decoded on another, every copy stayed in its own malloc
// arena: 267 -> 390 MB after 24 seeks here (265 -> 1617 MB in another
// session's measurement), and the soak above failed in CI when its hostile
// Resumes did the same (266 -> 672 MB).
TEST_F(ControlPlaneTest, SeeksBackAndForthKeepTheWorkersMemoryFlat) {
  WaitForTraining();
  const int64_t before = RssKb(worker_->process()->pid());
  std::atomic<bool> done{false};
  std::vector<std::thread> statuses;
  for (int i = 0; i < 4; ++i) {
    statuses.emplace_back([&] {
      while (!done.load()) (void)WorkerStatus();
    });
  }
  constexpr int kSeeks = 24;
  int trained = 0;
  for (int i = 0; i < kSeeks; ++i) {
    const WorkerStatusResponse st = WorkerStatus();
    // Back to the first step, or far ahead of where it is (more batches
    // than it would read forward: the data is decoded from there).
    const int64_t to = i % 2 == 0 ? 0 : st.step() + 2000 + 500 * i;
    PauseRequest pause;
    pause.set_generation(st.generation());
    EXPECT_TRUE(CallSync(Channel(cluster_.workers[0], 0), "/psrt.Worker/Pause", pause.SerializeAsString()).ok());
    ResumeRequest resume;
    resume.set_start_step(to);
    resume.set_generation(st.generation());
    grpc::Status s = CallSync(Channel(cluster_.workers[0], 0), "/psrt.Worker/Resume", resume.SerializeAsString());
    EXPECT_TRUE(s.ok()) << "resume at step " << to << ": " << s.error_message();
    // Until it has trained a step there (the chief may move it on).
    for (absl::Time end = absl::Now() + absl::Seconds(30); absl::Now() < end;) {
      const WorkerStatusResponse now = WorkerStatus();
      if (now.state() == WorkerStatusResponse::RUNNING && now.step() > to && now.step() < to + 1000) {
        ++trained;
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));  // between polls of the condition above
    }
  }
  done = true;
  for (std::thread& t : statuses) t.join();
  ASSERT_TRUE(Alive(worker_->process()->pid())) << "the worker died";
  const int64_t after = RssKb(worker_->process()->pid());
  std::cout << "FIGURE: worker RSS across " << kSeeks << " seeks (" << trained << " trained at their step): "
            << before / 1024 << " MB before, " << after / 1024 << " MB after" << std::endl;
  EXPECT_GE(trained, kSeeks / 2) << "the seeks did not take: the test proves nothing";
  // Without the fix: 267 -> 390 MB here (each seek's copy left in an arena).
  EXPECT_LE(after, before * 11 / 10 + 40 * 1024) << "the worker grew from " << before << " KiB";
}

}  // namespace
}  // namespace psrt
