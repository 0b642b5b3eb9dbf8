// A real Chief service on a loopback socket and real ChiefLinks: they
// register, heartbeat their progress, and register again on their own when
// the chief restarts.
#include "chief/chief_service.h"

#include "common/transport/chief_client.h"
#include "common/rpc/channel_cache.h"
#include "common/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

struct ChiefUnderTest {
  ChiefUnderTest(const ClusterSpec& spec, const std::string& address, uint64_t incarnation)
      : registry(spec, absl::Seconds(10)), service(&registry, incarnation) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
  }
  ~ChiefUnderTest() { server->Shutdown(); }
  TaskRegistry registry;
  ChiefServiceImpl service;
  std::unique_ptr<grpc::Server> server;
};

TaskInfo Self(const std::string& task, uint64_t incarnation) {
  TaskInfo t;
  *t.mutable_task() = *ParseTaskId(task);
  t.set_incarnation(incarnation);
  return t;
}

template <typename F>
bool WaitUntil(F f, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!f()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition, with a deadline
  }
  return true;
}

TEST(ChiefServiceTest, LinksRegisterHeartbeatAndComeBackAfterAChiefRestart) {
  std::string address = "127.0.0.1:" + std::to_string(*PickFreePort());
  ClusterSpec spec = *ClusterSpec::FromJson(
      absl::StrCat(R"({"chief": [")", address, R"("], "ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]})"),
      "test");
  auto chief = std::make_unique<ChiefUnderTest>(spec, address, 77);
  std::atomic<int> pauses{0};
  chief->service.command_for = [](const TaskId& t) {
    return t.job() == "worker" ? HeartbeatResponse::PAUSE : HeartbeatResponse::CONTINUE;
  };

  ChannelCache channels;
  ChiefLinkOptions o;
  o.heartbeat_interval = absl::Milliseconds(20);
  ChiefLink worker(channels.Get(address), address, Self("worker:0", 5), o);
  worker.set_progress([] { return Progress{123, 0.25f, 900.0, 2}; });
  worker.set_on_command([&](HeartbeatResponse::Command c) {
    if (c == HeartbeatResponse::PAUSE) ++pauses;
  });
  worker.Start();
  ASSERT_TRUE(worker.WaitRegistered(absl::Seconds(20)));
  ASSERT_TRUE(WaitUntil([&] { return chief->registry.Get(*ParseTaskId("worker:0")).step == 123; },
                        absl::Seconds(20)));
  EXPECT_EQ(chief->registry.Get(*ParseTaskId("worker:0")).epoch, 2);
  ASSERT_TRUE(WaitUntil([&] { return pauses.load() > 0; }, absl::Seconds(20)));

  auto status = worker.client()->JobStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->task_size(), 3);

  // The chief restarts with an empty registry; the link notices on its next
  // heartbeat and registers again.
  chief.reset();
  chief = std::make_unique<ChiefUnderTest>(spec, address, 78);
  ASSERT_TRUE(WaitUntil([&] { return chief->registry.Get(*ParseTaskId("worker:0")).info.incarnation() == 5; },
                        absl::Seconds(20)));
  EXPECT_TRUE(chief->registry.Missing().size() == 2);
  worker.Stop();
}

// A task of another job (another --job_name, or a spec whose tasks are
// elsewhere) is refused by name and its link stops for good; the same job
// registers, and a request without an identity (an older task) registers
// too, unchecked.
TEST(ChiefServiceTest, ATaskOfAnotherJobIsRefusedByNameAndItsLinkStops) {
  std::string address = "127.0.0.1:" + std::to_string(*PickFreePort());
  auto spec_with = [&](const std::string& ps) {
    return *ClusterSpec::FromJson(
        absl::StrCat(R"({"chief": [")", address, R"("], "ps": [")", ps, R"("], "worker": ["127.0.0.1:2"]})"),
        "test");
  };
  ClusterSpec spec = spec_with("127.0.0.1:1");
  ChiefUnderTest chief(spec, address, 77);
  chief.service.set_job_identity(MakeJobIdentity("mnist", spec));
  ChannelCache channels;
  ChiefLinkOptions o;
  o.heartbeat_interval = absl::Milliseconds(20);

  ChiefLink other_name(channels.Get(address), address, Self("worker:0", 5), o);
  other_name.set_job_identity(MakeJobIdentity("cifar", spec));
  std::atomic<int> refusals{0};
  other_name.set_on_refused([&](const absl::Status&) { ++refusals; });
  other_name.Start();
  EXPECT_FALSE(other_name.WaitRegistered(absl::Seconds(20)));
  EXPECT_EQ(other_name.refused().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other_name.refused().message().find(
                "worker:0 belongs to job 'cifar', but this chief runs job 'mnist'"),
            std::string::npos)
      << other_name.refused();
  other_name.Stop();
  EXPECT_EQ(refusals.load(), 1);

  ChiefLink other_cluster(channels.Get(address), address, Self("ps:0", 6), o);
  other_cluster.set_job_identity(MakeJobIdentity("mnist", spec_with("127.0.0.1:3")));
  other_cluster.Start();
  EXPECT_FALSE(other_cluster.WaitRegistered(absl::Seconds(20)));
  EXPECT_NE(other_cluster.refused().message().find(
                "ps:0 belongs to another cluster: its cluster spec (digest "),
            std::string::npos)
      << other_cluster.refused();
  EXPECT_NE(other_cluster.refused().message().find("has ps:0 at 127.0.0.1:3, this chief's"), std::string::npos);
  other_cluster.Stop();
  EXPECT_EQ(chief.registry.Get(*ParseTaskId("worker:0")).info.incarnation(), 0u);
  EXPECT_EQ(chief.registry.Get(*ParseTaskId("ps:0")).info.incarnation(), 0u);

  ChiefLink same(channels.Get(address), address, Self("worker:0", 7), o);
  same.set_job_identity(MakeJobIdentity("mnist", spec));
  same.Start();
  EXPECT_TRUE(same.WaitRegistered(absl::Seconds(20)));
  same.Stop();
  ChiefLink older(channels.Get(address), address, Self("ps:0", 8), o);  // no identity set
  older.Start();
  EXPECT_TRUE(older.WaitRegistered(absl::Seconds(20)));
  older.Stop();
}

// A peer's failure text cannot forge a log line or markup, a report needs
// the reporter's registered incarnation, and JobStatus shows no incarnation
// to a caller that is not the chief's own identity (here: nobody is).
TEST(ChiefServiceTest, FailureReportsAreEscapedAndIncarnationsAreNotShown) {
  std::string address = "127.0.0.1:" + std::to_string(*PickFreePort());
  ClusterSpec spec = *ClusterSpec::FromJson(
      absl::StrCat(R"({"chief": [")", address, R"("], "ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]})"),
      "test");
  ChiefUnderTest chief(spec, address, 77);
  std::vector<ReportFailureRequest> reports;
  absl::Mutex mu;
  chief.service.on_failure = [&](const ReportFailureRequest& r) {
    absl::MutexLock lock(&mu);
    reports.push_back(r);
  };
  auto stub = Chief::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto call = [&](auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ((*stub).*method)(&ctx, req, resp);
  };
  RegisterRequest reg;
  *reg.mutable_task() = Self("worker:0", 0x5eed);
  RegisterResponse reg_resp;
  ASSERT_TRUE(call(&Chief::Stub::Register, reg, &reg_resp).ok());

  ReportFailureRequest report;
  *report.mutable_reporter() = *ParseTaskId("worker:0");
  report.set_error("ps:0 is gone\nE1124 04:00:00 forged line <script>alert(1)</script>\r\x1b[2J");
  ReportFailureResponse ignored;
  grpc::Status s = call(&Chief::Stub::ReportFailure, report, &ignored);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << "a report without the incarnation";
  report.set_reporter_incarnation(0x5eee);
  EXPECT_EQ(call(&Chief::Stub::ReportFailure, report, &ignored).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  *report.mutable_reporter() = *ParseTaskId("worker:7");
  report.set_reporter_incarnation(0x5eed);
  EXPECT_EQ(call(&Chief::Stub::ReportFailure, report, &ignored).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  *report.mutable_reporter() = *ParseTaskId("worker:0");
  report.set_error(report.error() + std::string(100000, 'x'));
  s = call(&Chief::Stub::ReportFailure, report, &ignored);
  ASSERT_TRUE(s.ok()) << s.error_message();
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(reports.size(), 1u);
    const std::string& e = reports[0].error();
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.find('\r'), std::string::npos);
    EXPECT_EQ(e.find('\x1b'), std::string::npos);
    EXPECT_NE(e.find("ps:0 is gone\\nE1124"), std::string::npos) << e;
    EXPECT_LT(e.size(), 3000u) << "the text is bounded";
    EXPECT_NE(e.find("more bytes)"), std::string::npos);
  }

  JobStatusResponse status;
  ASSERT_TRUE(call(&Chief::Stub::JobStatus, JobStatusRequest(), &status).ok());
  ASSERT_EQ(status.task_size(), 3);
  for (const TaskInfo& t : status.task()) EXPECT_EQ(t.incarnation(), 0u) << TaskName(t.task());
  // ... yet the registry knows it, and a heartbeat needs it.
  EXPECT_EQ(chief.registry.Get(*ParseTaskId("worker:0")).info.incarnation(), 0x5eedu);
}

}  // namespace
}  // namespace psrt
