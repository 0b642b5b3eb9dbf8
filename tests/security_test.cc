// Transport security with real daemons on real sockets: a whole cluster
// (chief, PS, worker) trains under mutual TLS, under per-role tokens and
// under the shared token, while a stranger's calls to every service are
// refused, and so is every call a role may not make (roles.h).
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/plan/job_planner.h"
#include "common/rpc/channel_cache.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "proto/chief_service.grpc.pb.h"
#include "proto/worker_service.pb.h"
#include "common/cluster_spec.h"
#include "common/rpc/roles.h"
#include "common/transport/ps_stream.h"
#include "common/transport/ps_tcp_channel.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;
using testing::Daemon;

// Every method of every service, as (service, method) paths.
const std::vector<std::pair<int, std::string>>& AllMethods() {
  static const auto* methods = new std::vector<std::pair<int, std::string>>{
      {0, "/psrt.Chief/Register"},          {0, "/psrt.Chief/Heartbeat"},
      {0, "/psrt.Chief/ReportFailure"},     {0, "/psrt.Chief/JobStatus"},
      {1, "/psrt.ParameterServer/CreateVariables"}, {1, "/psrt.ParameterServer/Pull"},
      {1, "/psrt.ParameterServer/Push"},    {1, "/psrt.ParameterServer/PullRows"},
      {1, "/psrt.ParameterServer/PushRows"}, {1, "/psrt.ParameterServer/Snapshot"},
      {1, "/psrt.ParameterServer/Restore"}, {1, "/psrt.ParameterServer/Status"},
      {1, "/psrt.ParameterServer/MoveVariables"}, {1, "/psrt.ParameterServer/OpenDataPlane"},
      {2, "/psrt.Worker/Start"},            {2, "/psrt.Worker/Pause"},
      {2, "/psrt.Worker/Resume"},           {2, "/psrt.Worker/Status"},
      {2, "/psrt.Worker/Shutdown"}};
  return *methods;
}

// One call with an empty request (a valid empty proto; our raw PS decoders
// refuse it as malformed, which still shows the call got past the check).
grpc::Status CallEmpty(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                       grpc::ByteBuffer* response = nullptr) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), ignored;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, response ? response : &ignored,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  return status;
}

// The same empty request as one frame of ParameterServer/Exchange, the
// stream that carries workers' pushes and pulls: each frame is checked as
// the unary method of its name is.
// One data call as a frame of the Exchange stream, or (with `tcp_address`)
// of the PS's TCP data plane, opened with this channel's credentials (a PS
// under TLS offers none: the channel falls back to the stream).
grpc::Status CallFrame(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                       const std::string& tcp_address = "") {
  psframe::Method m;
  if (!psframe::MethodFromPath(method, &m)) return grpc::Status(grpc::StatusCode::INTERNAL, "not a data method");
  std::unique_ptr<PsCallChannel> stream;
  if (tcp_address.empty()) {
    stream = std::make_unique<PsStream>(channel, "ps:0");
  } else {
    stream = std::make_unique<PsTcpChannel>(channel, tcp_address, "ps:0");
  }
  grpc::Slice empty("");
  absl::Notification done;
  absl::Status status;
  stream->Start(m, grpc::ByteBuffer(&empty, 1), absl::Seconds(10), CallRoute(), [&](absl::StatusOr<grpc::ByteBuffer> r) {
    status = r.status();
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(20))) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no answer");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name_);
    certs_ = dir_ + "/certs";
    std::string script = testing::RunfilePath("deploy/make_certs.sh");
    ASSERT_EQ(std::system((script + " " + certs_ + " chief ps-0 worker-0 worker-1 client >/dev/null").c_str()), 0);
    // A second CA: its certificates look right but are not the cluster's.
    ASSERT_EQ(std::system((script + " " + dir_ + "/rogue client >/dev/null").c_str()), 0);
    auto c = testing::MakeTestCluster(1, 1, name_);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *c;
    job_path_ = testing::WriteJobFile(testing::EndlessMlpJob(dir_ + "/ckpt"), dir_ + "/job.pbtxt");
  }

  std::string Pem(const std::string& dir, const std::string& task) const { return dir + "/" + task; }

  // Flags of `task` (cert name `cert`) in a given security mode.
  std::vector<std::string> SecurityFlags(const std::string& mode, const std::string& cert) const {
    if (mode == "tls") {
      return {"--tls_ca=" + certs_ + "/ca.pem", "--tls_cert=" + certs_ + "/" + cert + ".pem",
              "--tls_key=" + certs_ + "/" + cert + ".key"};
    }
    if (mode == "roles") return {"--auth_token_file=" + certs_ + "/tokens/" + cert.substr(0, cert.find('-'))};
    if (mode == "tasks") return {"--auth_token_file=" + certs_ + "/tokens/" + (cert == "chief" ? "chief-0" : cert)};
    if (mode == "tls+tasks") {
      std::vector<std::string> flags = SecurityFlags("tls", cert);
      flags.push_back(SecurityFlags("tasks", cert)[0]);
      return flags;
    }
    return {"--auth_token_file=" + certs_ + "/token"};
  }

  void StartCluster(const std::string& mode) {
    auto start = [&](const std::string& binary, const std::string& task, const std::string& cert,
                     std::vector<std::string> extra) {
      std::vector<std::string> argv = {testing::RunfilePath(binary), "--cluster_spec=" + cluster_.spec_path,
                                       "--task=" + task};
      for (auto& f : SecurityFlags(mode, cert)) argv.push_back(f);
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto d = Daemon::Start(task, argv);
      EXPECT_TRUE(d.ok()) << d.status();
      return d.ok() ? *std::move(d) : nullptr;
    };
    ps_ = start("ps/server", "ps:0", "ps-0", {"--snapshot_dir=" + dir_});
    worker_ = start("worker/main", "worker:0", "worker-0", {"--threads=1"});
    chief_ = start("chief/main", "chief:0", "chief", {"--job=" + job_path_, "--threads=1"});
    ASSERT_TRUE(chief_ && ps_ && worker_);
  }

  // Waits until the chief, asked by `channel`, reports training past step 20.
  void ExpectTrainingThrough(const std::shared_ptr<grpc::Channel>& channel) {
    JobStatusResponse status;
    grpc::Status last;
    for (absl::Time end = absl::Now() + absl::Minutes(2); absl::Now() < end;) {
      last = JobStatus(channel, &status);
      if (last.ok() && status.step() > 20) break;
      absl::SleepFor(absl::Milliseconds(200));  // between polls of the condition above
    }
    ASSERT_TRUE(last.ok()) << last.error_message();
    EXPECT_GT(status.step(), 20) << "training did not advance under this mode";
    EXPECT_EQ(status.state(), JobStatusResponse::RUNNING);
  }

  // (The callback API, as the daemons use: gRPC 1.51's blocking stubs did not
  // finish TLS handshakes in this process.)
  static grpc::Status JobStatus(const std::shared_ptr<grpc::Channel>& channel, JobStatusResponse* out) {
    auto stub = Chief::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    JobStatusRequest req;
    grpc::Status status;
    absl::Notification done;
    stub->async()->JobStatus(&ctx, &req, out, [&](grpc::Status s) {
      status = std::move(s);
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }

  std::vector<std::string> Addresses() const { return {cluster_.chief, cluster_.ps[0], cluster_.workers[0]}; }

  std::string name_, dir_, certs_, job_path_;
  testing::TestCluster cluster_;
  std::unique_ptr<Daemon> chief_, ps_, worker_;
};

// Client options with the secrets `p` names (a test failure if they do not load).
RpcOptions Loaded(const SecurityPaths& p) {
  RpcOptions o;
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(p);
  EXPECT_TRUE(security.ok()) << security.status();
  if (security.ok()) o.security = *security;
  return o;
}

RpcOptions Tls(const std::string& dir, const std::string& ca_dir, const std::string& cert = "client") {
  SecurityPaths p;
  p.tls_ca = ca_dir + "/ca.pem";
  p.tls_cert = dir + "/" + cert + ".pem";
  p.tls_key = dir + "/" + cert + ".key";
  return Loaded(p);
}

TEST_F(SecurityTest, MutualTlsServesTheClusterAndRefusesClientsWithoutItsCertificates) {
  StartCluster("tls");
  // The daemons found each other over TLS: training advances.
  ExpectTrainingThrough(MakeChannel(cluster_.chief, Tls(certs_, certs_)));
  ASSERT_TRUE(chief_->WaitForLine("(mutual TLS)", absl::Seconds(10)));

  RpcOptions plain;  // no certificate at all
  RpcOptions rogue = Tls(dir_ + "/rogue", certs_);  // trusts our CA, presents a stranger's cert
  for (const auto& [service, method] : AllMethods()) {
    const std::string address = Addresses()[service];
    grpc::Status s = CallEmpty(MakeChannel(address, plain), method);
    EXPECT_FALSE(s.ok()) << method << " answered a plain-text client";
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << method << ": " << s.error_message();
    s = CallEmpty(MakeChannel(address, rogue), method);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << method << " answered a client whose certificate is from another CA: " << s.error_message();
  }
  // A client with the cluster's certificate is served by every service.
  RpcOptions ours = Tls(certs_, certs_);
  for (int service = 0; service < 3; ++service) {
    const char* status_method[] = {"/psrt.Chief/JobStatus", "/psrt.ParameterServer/Status", "/psrt.Worker/Status"};
    grpc::Status s = CallEmpty(MakeChannel(Addresses()[service], ours), status_method[service]);
    EXPECT_TRUE(s.ok()) << status_method[service] << ": " << s.error_message();
  }
}

TEST_F(SecurityTest, SharedTokenRefusesEveryMethodWithoutTheToken) {
  StartCluster("token");
  SecurityPaths with_token;
  with_token.token_file = certs_ + "/token";
  RpcOptions ours;
  ASSERT_TRUE(LoadTransportSecurity(with_token).ok());
  ours.security = *LoadTransportSecurity(with_token);
  ExpectTrainingThrough(MakeChannel(cluster_.chief, ours));

  std::string wrong_file = dir_ + "/wrong_token";
  std::ofstream(wrong_file) << "0123456789abcdef0123456789abcdef\n";
  SecurityPaths wrong_paths;
  wrong_paths.token_file = wrong_file;
  RpcOptions wrong;
  ASSERT_TRUE(LoadTransportSecurity(wrong_paths).ok());
  wrong.security = *LoadTransportSecurity(wrong_paths);
  for (const auto& [service, method] : AllMethods()) {
    const std::string address = Addresses()[service];
    grpc::Status s = CallEmpty(MakeChannel(address, RpcOptions()), method);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("requires a token")) << method;
    s = CallEmpty(MakeChannel(address, wrong), method);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << ": " << s.error_message();
    psframe::Method data;
    if (!psframe::MethodFromPath(method, &data)) continue;
    s = CallFrame(MakeChannel(address, RpcOptions()), method);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << " as a frame: " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("requires a token")) << method;
    s = CallFrame(MakeChannel(address, wrong), method);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << " as a frame: " << s.error_message();
    // Over TCP: no ticket without a token (OpenDataPlane is refused first).
    s = CallFrame(MakeChannel(address, RpcOptions()), method, address);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << " over TCP: " << s.error_message();
    s = CallFrame(MakeChannel(address, wrong), method, address);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << " over TCP: " << s.error_message();
  }
  // The refused Pause and Shutdown did not touch the worker: it still runs.
  grpc::ByteBuffer bytes;
  ASSERT_TRUE(CallEmpty(MakeChannel(cluster_.workers[0], ours), "/psrt.Worker/Status", &bytes).ok());
  grpc::Slice slice;
  ASSERT_TRUE(bytes.TrySingleSlice(&slice).ok() || bytes.DumpToSingleSlice(&slice).ok());
  WorkerStatusResponse worker;
  ASSERT_TRUE(worker.ParseFromArray(slice.begin(), static_cast<int>(slice.size())));
  EXPECT_EQ(worker.state(), WorkerStatusResponse::RUNNING);
  JobStatusResponse job;
  ASSERT_TRUE(JobStatus(MakeChannel(cluster_.chief, ours), &job).ok());
  EXPECT_EQ(job.state(), JobStatusResponse::RUNNING);
  EXPECT_TRUE(CallEmpty(MakeChannel(cluster_.ps[0], ours), "/psrt.ParameterServer/Status").ok());
}

RpcOptions RoleToken(const std::string& certs, const std::string& role) {
  SecurityPaths p;
  p.token_file = certs + "/tokens/" + role;
  return Loaded(p);
}

// The method of roles.h a "/psrt.Service/Method" path names.
Rpc RpcOf(const std::string& path) {
  for (int i = 0; i < kRpcCount; ++i) {
    if (absl::StrCat("/psrt.", RpcName(static_cast<Rpc>(i))) == path) return static_cast<Rpc>(i);
  }
  ADD_FAILURE() << "no such method " << path;
  return Rpc::kChiefJobStatus;
}

grpc::Status CallProto(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                       const google::protobuf::Message& request) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1), ignored;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &buffer, &ignored, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

// Each identity calls every method its role may not: PERMISSION_DENIED
// naming its role and the method, and nothing changes (training goes on).
// Then a worker heartbeats and reports as a task it is not: refused.
void ExpectEveryRefusedPair(const std::vector<std::pair<Role, RpcOptions>>& identities,
                            const std::vector<std::string>& addresses, int* refused) {
  for (const auto& [role, options] : identities) {
    for (const auto& [service, method] : AllMethods()) {
      if ((AllowedRoles(RpcOf(method)) & static_cast<uint8_t>(role)) != 0) continue;
      grpc::Status s = CallEmpty(MakeChannel(addresses[service], options), method);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << RoleName(role) << " calling " << method << ": " << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("(role ", RoleName(role), ") may not call ",
                                                            RpcName(RpcOf(method)))));
      ++*refused;
      psframe::Method data;
      if (psframe::MethodFromPath(method, &data)) {
        s = CallFrame(MakeChannel(addresses[service], options), method);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << RoleName(role) << " calling " << method << " as a frame: " << s.error_message();
        // Over TCP: the ticket carries the role, each frame is checked as
        // its method (an observer gets no ticket at all).
        s = CallFrame(MakeChannel(addresses[service], options), method, addresses[service]);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << RoleName(role) << " calling " << method << " over TCP: " << s.error_message();
      }
    }
  }
}

TEST_F(SecurityTest, UnderTlsEachCertificateMayCallOnlyWhatItsTaskMay) {
  StartCluster("tls");
  ExpectTrainingThrough(MakeChannel(cluster_.chief, Tls(certs_, certs_)));
  int refused = 0;
  ExpectEveryRefusedPair({{Role::kChief, Tls(certs_, certs_, "chief")},
                          {Role::kPs, Tls(certs_, certs_, "ps-0")},
                          {Role::kWorker, Tls(certs_, certs_, "worker-0")},
                          {Role::kObserver, Tls(certs_, certs_, "client")}},
                         Addresses(), &refused);
  EXPECT_EQ(refused, 46);  // 19 methods x 4 roles, less the 30 allowed pairs
  // A worker's certificate speaks for its own task only.
  RpcOptions worker1 = Tls(certs_, certs_, "worker-1");
  HeartbeatRequest beat;
  *beat.mutable_task() = *ParseTaskId("worker:0");
  grpc::Status s = CallProto(MakeChannel(cluster_.chief, worker1), "/psrt.Chief/Heartbeat", beat);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("certificate worker-1 (role worker) may not heartbeat for worker:0"));
  *beat.mutable_task() = *ParseTaskId("ps:0");
  s = CallProto(MakeChannel(cluster_.chief, Tls(certs_, certs_, "worker-0")), "/psrt.Chief/Heartbeat", beat);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  ReportFailureRequest report;
  *report.mutable_reporter() = *ParseTaskId("worker:0");
  s = CallProto(MakeChannel(cluster_.chief, worker1), "/psrt.Chief/ReportFailure", report);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  RegisterRequest reg;
  reg.mutable_task()->mutable_task()->set_job("worker");
  reg.mutable_task()->set_incarnation(1);
  s = CallProto(MakeChannel(cluster_.chief, worker1), "/psrt.Chief/Register", reg);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // The real worker:0, right incarnation or not, is still the registered one.
  JobStatusResponse job;
  ASSERT_TRUE(JobStatus(MakeChannel(cluster_.chief, Tls(certs_, certs_, "chief")), &job).ok());
  EXPECT_EQ(job.state(), JobStatusResponse::RUNNING);
  int shown = 0;
  for (const TaskInfo& t : job.task()) shown += t.incarnation() != 0;
  EXPECT_EQ(shown, 3) << "the chief's own certificate sees every incarnation (its own too)";
  ASSERT_TRUE(JobStatus(MakeChannel(cluster_.chief, Tls(certs_, certs_, "client")), &job).ok());
  for (const TaskInfo& t : job.task()) EXPECT_EQ(t.incarnation(), 0u) << "an observer sees none";
  ExpectTrainingThrough(MakeChannel(cluster_.chief, Tls(certs_, certs_)));
}

TEST_F(SecurityTest, PerRoleTokensLimitEachRoleAndAWorkerTokenCannotActForAPs) {
  StartCluster("roles");
  ASSERT_TRUE(chief_->WaitForLine("(per-role tokens over plain text)", absl::Seconds(30)));
  ExpectTrainingThrough(MakeChannel(cluster_.chief, RoleToken(certs_, "observer")));
  int refused = 0;
  ExpectEveryRefusedPair({{Role::kChief, RoleToken(certs_, "chief")},
                          {Role::kPs, RoleToken(certs_, "ps")},
                          {Role::kWorker, RoleToken(certs_, "worker")},
                          {Role::kObserver, RoleToken(certs_, "observer")}},
                         Addresses(), &refused);
  EXPECT_EQ(refused, 46);
  HeartbeatRequest beat;
  *beat.mutable_task() = *ParseTaskId("ps:0");
  grpc::Status s = CallProto(MakeChannel(cluster_.chief, RoleToken(certs_, "worker")), "/psrt.Chief/Heartbeat", beat);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("the worker token (role worker) may not heartbeat for ps:0"));
  // The legacy shared token is no key to a cluster of role tokens.
  SecurityPaths shared;
  shared.token_file = certs_ + "/token";
  RpcOptions legacy;
  legacy.security = *LoadTransportSecurity(shared);
  s = CallEmpty(MakeChannel(cluster_.ps[0], legacy), "/psrt.ParameterServer/Status");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  // Within a role a token cannot tell tasks apart; the incarnation does:
  // JobStatus shows it to the chief's token only.
  JobStatusResponse job;
  ASSERT_TRUE(JobStatus(MakeChannel(cluster_.chief, RoleToken(certs_, "observer")), &job).ok());
  for (const TaskInfo& t : job.task()) EXPECT_EQ(t.incarnation(), 0u);
  ExpectTrainingThrough(MakeChannel(cluster_.chief, RoleToken(certs_, "observer")));
}

// Per-task tokens (tokens/TASK of make_certs.sh): a worker's token speaks
// for that worker only, as its certificate does under TLS. Worker 1's token
// can neither register nor heartbeat (nor leave) as worker 0, and the
// chief's record of worker 0 stays as it was; worker 0's own token is heard.
TEST_F(SecurityTest, PerTaskTokensLetAWorkerSpeakOnlyForItself) {
  StartCluster("tasks");
  ASSERT_TRUE(chief_->WaitForLine("(per-role tokens over plain text)", absl::Seconds(30)));
  ExpectTrainingThrough(MakeChannel(cluster_.chief, RoleToken(certs_, "observer")));
  // worker:0 as the chief's token sees it (with its incarnation).
  auto worker0 = [&] {
    JobStatusResponse job;
    grpc::Status s = JobStatus(MakeChannel(cluster_.chief, RoleToken(certs_, "chief-0")), &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (const TaskInfo& t : job.task()) {
      if (TaskName(t.task()) == "worker:0") return t;
    }
    ADD_FAILURE() << "JobStatus names no worker:0";
    return TaskInfo();
  };
  const TaskInfo before = worker0();
  ASSERT_NE(before.incarnation(), 0u);

  const RpcOptions worker1 = RoleToken(certs_, "worker-1");
  RegisterRequest reg;
  *reg.mutable_task()->mutable_task() = *ParseTaskId("worker:0");
  reg.mutable_task()->set_address(before.address());
  reg.mutable_task()->set_incarnation(before.incarnation() + 1);
  reg.mutable_task()->set_collective_address("127.0.0.1:1");
  grpc::Status s = CallProto(MakeChannel(cluster_.chief, worker1), "/psrt.Chief/Register", reg);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("the worker-1 token (role worker) may not register for worker:0"));
  HeartbeatRequest beat;
  *beat.mutable_task() = *ParseTaskId("worker:0");
  beat.set_incarnation(before.incarnation());
  s = CallProto(MakeChannel(cluster_.chief, worker1), "/psrt.Chief/Heartbeat", beat);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("the worker-1 token (role worker) may not heartbeat for worker:0"));
  beat.set_leaving(true);  // nor make it leave the job
  s = CallProto(MakeChannel(cluster_.chief, worker1), "/psrt.Chief/Heartbeat", beat);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // The role's shared token is no key to a cluster of per-task tokens.
  beat.set_leaving(false);
  s = CallProto(MakeChannel(cluster_.chief, RoleToken(certs_, "worker")), "/psrt.Chief/Heartbeat", beat);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();

  const TaskInfo after = worker0();
  EXPECT_EQ(after.incarnation(), before.incarnation());
  EXPECT_EQ(after.collective_address(), before.collective_address());
  EXPECT_EQ(after.address(), before.address());

  // Worker 0's own token is heard as worker 0 (a stale incarnation: told to
  // re-register, which changes nothing).
  beat.set_incarnation(before.incarnation() + 1);
  s = CallProto(MakeChannel(cluster_.chief, RoleToken(certs_, "worker-0")), "/psrt.Chief/Heartbeat", beat);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(worker0().incarnation(), before.incarnation());
  ExpectTrainingThrough(MakeChannel(cluster_.chief, RoleToken(certs_, "observer")));
}

// Mutual TLS and per-task tokens at once: the certificate and the token
// must name the same task. Worker 1's certificate with worker 0's token
// speaks for nobody; worker 0's certificate with its own token is heard.
TEST_F(SecurityTest, UnderTlsAPerTaskTokenMustNameTheCertificatesTask) {
  StartCluster("tls+tasks");
  auto both = [&](const std::string& cert, const std::string& token) {
    SecurityPaths p;
    p.tls_ca = certs_ + "/ca.pem";
    p.tls_cert = certs_ + "/" + cert + ".pem";
    p.tls_key = certs_ + "/" + cert + ".key";
    p.token_file = certs_ + "/tokens/" + token;
    return Loaded(p);
  };
  ExpectTrainingThrough(MakeChannel(cluster_.chief, both("client", "observer")));
  HeartbeatRequest beat;
  *beat.mutable_task() = *ParseTaskId("worker:0");
  beat.set_incarnation(1);  // not worker 0's: a heard beat is told to re-register, nothing changes
  grpc::Status s = CallProto(MakeChannel(cluster_.chief, both("worker-1", "worker-0")), "/psrt.Chief/Heartbeat", beat);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("certificate worker-1 with the worker-0 token (role no role)"));
  s = CallProto(MakeChannel(cluster_.chief, both("worker-0", "worker-0")), "/psrt.Chief/Heartbeat", beat);
  EXPECT_TRUE(s.ok()) << s.error_message();
  ExpectTrainingThrough(MakeChannel(cluster_.chief, both("client", "observer")));
}

// The local address the TCP socket listening on `port` is bound to, as
// /proc/net/tcp writes it ("0100007F" is 127.0.0.1), or "" if none.
std::string ListeningAddress(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  char want[8];
  std::snprintf(want, sizeof(want), ":%04X", port);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state;
    f >> slot >> local >> remote >> state;
    if (state == "0A" && absl::EndsWith(local, want)) return local.substr(0, local.find(':'));
  }
  return "";
}

// Under TLS the clear TCP data plane is refused unless the user says they
// mean it: one INFO line was all a user got for tensors sent in clear.
TEST_F(SecurityTest, UnderTlsTheClearDataPlaneNeedsItsOwnFlag) {
  std::vector<std::string> argv = {testing::RunfilePath("ps/server"), "--cluster_spec=" + cluster_.spec_path,
                                   "--task=ps:0", "--snapshot_dir=" + dir_, "--tcp_data_plane=on"};
  for (auto& f : SecurityFlags("tls", "ps-0")) argv.push_back(f);
  auto refused = Daemon::Start("ps:0", argv);
  ASSERT_TRUE(refused.ok()) << refused.status();
  absl::StatusOr<int> exit = (*refused)->Wait(absl::Seconds(30));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) != 0);
  EXPECT_TRUE((*refused)->WaitForLine("add --allow_plaintext_data_plane if that is meant", absl::ZeroDuration()));
  argv.push_back("--allow_plaintext_data_plane");
  auto allowed = Daemon::Start("ps:0", argv);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_TRUE((*allowed)->WaitForLine("NOT encrypted", absl::Seconds(30)));
}

// The chief's status page listens on loopback unless told otherwise, and
// with --http_token_file answers nobody without the token.
TEST_F(SecurityTest, StatusPageListensOnLoopbackByDefaultAndCanRequireAToken) {
  for (const std::string listen : {"", "0.0.0.0"}) {
    int port = *PickFreePort();
    std::vector<std::string> argv = {testing::RunfilePath("chief/main"), "--cluster_spec=" + cluster_.spec_path,
                                     "--task=chief:0", "--job=" + job_path_, absl::StrCat("--http_port=", port),
                                     "--http_token_file=" + certs_ + "/token"};
    if (!listen.empty()) argv.push_back("--http_listen=" + listen);
    auto chief = Daemon::Start("chief:0", argv);
    ASSERT_TRUE(chief.ok()) << chief.status();
    ASSERT_TRUE((*chief)->WaitForLine("(token required)", absl::Seconds(30)));
    EXPECT_EQ(ListeningAddress(port), listen.empty() ? "0100007F" : "00000000") << listen;
    httplib::Client http("127.0.0.1", port);
    auto page = http.Get("/metrics");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 401);
    std::ifstream token_file(certs_ + "/token");
    std::string token;
    std::getline(token_file, token);
    page = http.Get("/metrics", {{"Authorization", "Bearer " + token}});
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_THAT(page->body, HasSubstr("psrt_step "));
  }
}

TEST(SecurityFlagsTest, BadSecretsAreRefusedNamingTheFlagAndFile) {
  std::string dir = std::getenv("TEST_TMPDIR");
  SecurityPaths p;
  p.tls_ca = dir + "/missing.pem";
  EXPECT_THAT(std::string(LoadTransportSecurity(p).status().message()), HasSubstr("all of --tls_ca"));
  p.tls_cert = dir + "/missing.pem";
  p.tls_key = dir + "/missing.key";
  EXPECT_THAT(std::string(LoadTransportSecurity(p).status().message()),
              HasSubstr("--tls_ca=" + dir + "/missing.pem: cannot read"));
  std::ofstream(dir + "/not_pem") << "hello\n";
  p.tls_ca = p.tls_cert = p.tls_key = dir + "/not_pem";
  EXPECT_THAT(std::string(LoadTransportSecurity(p).status().message()), HasSubstr("not a PEM file"));
  SecurityPaths t;
  t.token_file = dir + "/short";
  std::ofstream(t.token_file) << "abc\n";
  EXPECT_THAT(std::string(LoadTransportSecurity(t).status().message()), HasSubstr("at least 16"));
}

}  // namespace
}  // namespace psrt
