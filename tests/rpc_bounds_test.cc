// The chief's gRPC port against a stranger with no token (issue #28): gRPC
// receives a unary request whole before the token is checked, so with the
// old 1 GiB message limit and no memory quota a stranger could make the
// chief buffer gigabytes. Now a message above --max_receive_message_mb is
// refused (RESOURCE_EXHAUSTED) and a memory quota bounds what calls in
// flight hold: the chief's peak memory stays within a few hundred MiB of
// where it started, and it goes on answering its own cluster. A job at the
// job-file limits (10,000 layers: a Start of about 7 MB) still trains.
#include <sys/wait.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/channel_cache.h"
#include "common/rpc/security.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/chief_service.grpc.pb.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::RunfilePath;

std::string TempPath(const std::string& name) { return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name); }

std::string WriteSmallJob() {
  const std::string path = TempPath("rpc_bounds.pbtxt");
  std::ofstream(path) << "name: \"rpc_bounds\"\nmodel { sequential { layer { dense { units: 2 } } }\n"
                      << "  loss { kind: SOFTMAX_CROSS_ENTROPY } }\n"
                      << "input { format: LIBSVM batch_size: 1 train { files: \"/dev/null\" } }\n"
                      << "optimizer { sgd { learning_rate: 0.1 } }\nsteps: 1\n";
  return path;
}

// Answers of calls in flight, in the order they come.
struct Answers {
  size_t calls = 0;
  std::vector<grpc::Status> statuses;
  bool AllIn() const { return statuses.size() == calls; }
};

// A token file for the cluster; returns its path.
std::string WriteToken() {
  const std::string path = TempPath("token");
  std::ofstream(path) << "0123456789abcdef0123456789abcdef\n";
  return path;
}

// Starts `binary` as `task` of the cluster under the shared token.
std::unique_ptr<Daemon> StartTask(const std::string& binary, const std::string& task, const std::string& spec,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {RunfilePath(binary), "--cluster_spec=" + spec, "--task=" + task,
                                   "--auth_token_file=" + WriteToken()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto d = Daemon::Start(task, argv);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

TEST(RpcBoundsTest, AStrangersLargeRequestsAreRefusedAndTheChiefsMemoryStaysBounded) {
  auto cluster = testing::MakeTestCluster(1, 1, "rpc_bounds");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string token_file = WriteToken();
  std::unique_ptr<Daemon> chief = StartTask("chief/main", "chief:0", cluster->spec_path, {"--job=" + WriteSmallJob()});
  ASSERT_NE(chief, nullptr);
  ASSERT_TRUE(chief->WaitForLine("chief serving at", absl::Minutes(1)));
  const pid_t pid = chief->process()->pid();
  const int64_t before_kb = testing::RssKb(pid);
  ASSERT_GT(before_kb, 0);

  // Four connections of four calls each, 96 to 512 MiB apiece (3.9 GiB in
  // all), sent from one buffer without copies.
  const std::string payload(size_t{512} << 20, 'x');
  RpcOptions stranger;  // no token; sends up to 1 GiB
  absl::Mutex mu;
  Answers answers;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ByteBuffer>> requests, responses;
  const std::vector<size_t> mib = {96, 128, 256, 512};
  answers.calls = 4 * mib.size();
  for (int c = 0; c < 4; ++c) {
    channels.push_back(MakeChannel(cluster->chief, stranger));
    stubs.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
    for (size_t m : mib) {
      grpc::Slice slice(payload.data(), m << 20, grpc::Slice::STATIC_SLICE);
      requests.push_back(std::make_unique<grpc::ByteBuffer>(&slice, 1));
      responses.push_back(std::make_unique<grpc::ByteBuffer>());
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
      stubs.back()->UnaryCall(contexts.back().get(), "/psrt.Chief/Register", grpc::StubOptions(), requests.back().get(),
                              responses.back().get(), [&mu, &answers](grpc::Status s) {
                                absl::MutexLock lock(&mu);
                                answers.statuses.push_back(s);
                              });
    }
  }
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&answers, &Answers::AllIn), absl::Minutes(3)))
        << answers.statuses.size() << " of " << answers.calls << " calls answered";
    for (const grpc::Status& s : answers.statuses) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    }
  }
  const int64_t peak_kb = testing::PeakRssKb(pid);
  std::cout << "chief RSS before " << before_kb / 1024 << " MiB, peak " << peak_kb / 1024 << " MiB, now "
            << testing::RssKb(pid) / 1024 << " MiB" << std::endl;
  EXPECT_LT(peak_kb - before_kb, int64_t{512} << 10) << "the chief grew by more than 512 MiB";

  // Its own cluster is still answered.
  SecurityPaths paths;
  paths.token_file = token_file;
  absl::StatusOr<TransportSecurity> security = LoadTransportSecurity(paths);
  ASSERT_TRUE(security.ok()) << security.status();
  RpcOptions ours;
  ours.security = *security;
  auto stub = Chief::NewStub(MakeChannel(cluster->chief, ours));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  JobStatusRequest req;
  JobStatusResponse resp;
  grpc::Status s = stub->JobStatus(&context, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// The largest legitimate Start: a model at --max_model_layers (10,000
// layers) is a compute graph of 70,000 nodes, about 7 MB, well within the
// default 64 MiB; the job trains its step under the default limits.
TEST(RpcBoundsTest, AJobAtTheLayerLimitStillStarts) {
  auto cluster = testing::MakeTestCluster(1, 1, "rpc_bounds_large");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string job = TempPath("large.pbtxt");
  {
    std::ofstream out(job);
    out << "name: \"large\"\nmodel {\n  sequential {\n    layer { flatten {} }\n";
    for (int i = 0; i < 9998; ++i) out << "    layer { dense { units: 1 } }\n";
    out << "    layer { dense { units: 10 } }\n  }\n  loss { kind: SOFTMAX_CROSS_ENTROPY }\n}\n"
        << "input {\n  format: IDX\n  train {\n"
        << "    files: \"/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz\"\n"
        << "    labels_file: \"/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz\"\n  }\n"
        << "  batch_size: 8\n  scale: 0.00392156862745098\n  num_classes: 10\n}\n"
        << "optimizer { sgd { learning_rate: 0.01 } }\nsteps: 1\n";
  }
  std::unique_ptr<Daemon> ps = StartTask("ps/server", "ps:0", cluster->spec_path, {"--snapshot_dir=" + TempPath("ps")});
  std::unique_ptr<Daemon> worker =
      StartTask("worker/main", "worker:0", cluster->spec_path, {"--threads=1", "--snapshot_dir=" + TempPath("w")});
  std::unique_ptr<Daemon> chief =
      StartTask("chief/main", "chief:0", cluster->spec_path, {"--job=" + job, "--checkpoint_dir=" + TempPath("ckpt")});
  ASSERT_TRUE(ps && worker && chief);
  absl::StatusOr<int> status = chief->Wait(absl::Minutes(8));
  ASSERT_TRUE(status.ok()) << "the chief did not finish: " << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "chief wait status " << *status;
}

}  // namespace
}  // namespace psrt
