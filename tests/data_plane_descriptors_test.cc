// A PS whose descriptors run out on its data plane (issue #28): with the
// limit at 1,024, 1,200 idle data-plane connections once made gRPC log "Too
// many open files" and never accept again, and the accept loop spun on the
// connection it could not take. Now the data plane holds at most what the
// descriptor limit leaves beside gRPC's share, shedding the oldest
// connection still awaiting its hello for a newcomer: under a limit of 256
// and 600 strangers' connections the PS uses little CPU, answers Status on
// fresh gRPC connections, and once they are gone serves a worker's ticket.
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/net/socket.h"
#include "common/rpc/channel_cache.h"
#include "common/transport/ps_frame.h"
#include "common/transport/ps_tcp_channel.h"
#include "gtest/gtest.h"
#include "proto/ps_service.grpc.pb.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::RunfilePath;

// utime + stime of `pid` in clock ticks; -1 when it is gone.
int64_t CpuTicks(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  int64_t utime = 0, stime = 0;
  // After the name: state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14 && !absl::SimpleAtoi(f, &utime)) return -1;
    if (i == 15 && !absl::SimpleAtoi(f, &stime)) return -1;
  }
  return utime + stime;
}

grpc::Status PsStatus(const std::string& address) {
  // A fresh channel each time: a new connection that gRPC must accept.
  auto stub = ParameterServer::NewStub(MakeChannel(address, RpcOptions()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  PsStatusResponse resp;
  return stub->Status(&ctx, PsStatusRequest(), &resp);
}

// An empty Pull over the TCP data plane (OpenDataPlane, connect, hello,
// one frame): its answer, whatever the PS makes of an empty request.
absl::Status PullOverTcp(const std::string& address) {
  PsTcpChannel tcp(MakeChannel(address, RpcOptions()), address, "ps:0");
  psframe::Method pull;
  EXPECT_TRUE(psframe::MethodFromPath("/psrt.ParameterServer/Pull", &pull));
  grpc::Slice empty("");
  absl::Notification done;
  absl::Status status;
  tcp.Start(pull, grpc::ByteBuffer(&empty, 1), absl::Seconds(10), CallRoute(), [&](absl::StatusOr<grpc::ByteBuffer> r) {
    status = r.status();
    done.Notify();
  });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(20))) return absl::DeadlineExceededError("no answer");
  return status;
}

TEST(DataPlaneDescriptorsTest, StrangersBeyondTheDescriptorLimitNeitherSpinThePsNorStarveGrpc) {
  auto cluster = testing::MakeTestCluster(1, 1, "descriptors");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string address = cluster->ps[0];
  // prlimit execs the PS: the pid is the PS's.
  auto ps = Daemon::Start(
      "ps:0", {"/usr/bin/prlimit", "--nofile=256:256", RunfilePath("ps/server"), "--cluster_spec=" + cluster->spec_path,
               "--task=ps:0", "--tcp_data_plane=on", "--max_unauthenticated_per_source=0",
               "--snapshot_dir=" + std::string(std::getenv("TEST_TMPDIR")) + "/ps"});
  ASSERT_TRUE(ps.ok()) << ps.status();
  const std::string serving = (*ps)->WaitForMatch("TCP data plane on port [0-9]+", absl::Minutes(1));
  ASSERT_FALSE(serving.empty());
  int data_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(serving.substr(serving.rfind(' ') + 1), &data_port)) << serving;
  EXPECT_TRUE((*ps)->WaitForLine("TCP data plane: at most 128 connections (not 1024)", absl::ZeroDuration()));
  const pid_t pid = (*ps)->process()->pid();

  // This process holds its end of every connection.
  rlimit fds{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &fds), 0);
  fds.rlim_cur = fds.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &fds), 0);
  ASSERT_GE(fds.rlim_cur, 1024u);
  std::vector<net::Fd> strangers;
  for (int i = 0; i < 600; ++i) {
    absl::StatusOr<net::Fd> fd = net::ConnectOnce("127.0.0.1", data_port, 0, absl::Now() + absl::Seconds(5), nullptr);
    ASSERT_TRUE(fd.ok()) << "connection " << i << ": " << fd.status();
    strangers.push_back(*std::move(fd));
  }

  // Three seconds into the attack the PS's CPU over them stays low (a
  // spinning accept loop takes a whole core), and gRPC still answers on
  // new connections.
  const int64_t ticks_before = CpuTicks(pid);
  const absl::Time begin = absl::Now();
  absl::SleepFor(absl::Seconds(3));  // the window over which CPU is measured
  const double seconds = absl::ToDoubleSeconds(absl::Now() - begin);
  const double cpu = static_cast<double>(CpuTicks(pid) - ticks_before) / ::sysconf(_SC_CLK_TCK) / seconds;
  std::cout << "PS CPU during the attack: " << cpu * 100 << "% of a core" << std::endl;
  EXPECT_LT(cpu, 0.5);
  for (int i = 0; i < 20; ++i) {
    grpc::Status s = PsStatus(address);
    ASSERT_TRUE(s.ok()) << "Status " << i << " during the attack: " << s.error_message();
  }

  // Once they are gone a worker's connection is admitted and served.
  strangers.clear();
  absl::Status pulled = PullOverTcp(address);
  EXPECT_NE(pulled.code(), absl::StatusCode::kUnavailable) << pulled;
  EXPECT_NE(pulled.code(), absl::StatusCode::kUnauthenticated) << pulled;
  EXPECT_NE(pulled.code(), absl::StatusCode::kDeadlineExceeded) << pulled;
  EXPECT_NE(pulled.code(), absl::StatusCode::kResourceExhausted) << pulled;
  EXPECT_TRUE(PsStatus(address).ok());
}

}  // namespace
}  // namespace psrt
