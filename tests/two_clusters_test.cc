// Two clusters never mix. gRPC sets SO_REUSEPORT by default, so a second
// cluster's PS and worker once started on the ports of a running cluster
// and registered with its chief, with no error anywhere.
//
// Ports: a running cluster (its chief with a status page, a PS with a TCP
// data plane, a worker with a collective port) holds its ports; a second
// process on each of them (the gRPC ports, the data plane, the collective
// port, the HTTP port) must exit non-zero saying which address is in use,
// and the first ones must go on answering.
//
// Registration: a task whose spec names the first cluster's chief but whose
// other tasks are elsewhere, or whose --job_name is another, is refused by
// the chief naming both sides, and exits non-zero with that error; a task
// of the job registers.
#include <sys/wait.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "chief/cluster_clients.h"
#include "common/rpc/channel_cache.h"
#include "common/subprocess.h"
#include "common/transport/chief_client.h"
#include "gtest/gtest.h"
#include "tests/harness/process_harness.h"

namespace psrt {
namespace {

using testing::Daemon;
using testing::RunfilePath;

constexpr char kInUse[] = ": the port is in use by another process";

std::unique_ptr<Daemon> MustStart(const std::string& name, const std::vector<std::string>& argv,
                                  const std::string& ready) {
  auto d = Daemon::Start(name, argv);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return nullptr;
  EXPECT_TRUE((*d)->WaitForLine(ready, absl::Seconds(60))) << name << " never printed '" << ready << "'";
  return *std::move(d);
}

// Starts `argv`, which must exit non-zero within a minute having printed
// `error`.
void ExpectRefused(const std::string& name, const std::vector<std::string>& argv, const std::string& error) {
  auto d = Daemon::Start(name, argv);
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<int> status = (*d)->Wait(absl::Seconds(60));
  ASSERT_TRUE(status.ok()) << name << " did not exit: " << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << name << " wait status " << *status;
  EXPECT_TRUE((*d)->WaitForLine(error, absl::Seconds(1))) << name << " did not say '" << error << "'";
}

class TwoClustersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = std::getenv("TEST_TMPDIR");
    // Two workers in the spec, one started: the chief waits for the other
    // and no training starts.
    auto first = testing::MakeTestCluster(1, 2, "first");
    ASSERT_TRUE(first.ok()) << first.status();
    first_ = *first;
    auto second = testing::MakeTestCluster(1, 2, "second");
    ASSERT_TRUE(second.ok()) << second.status();
    second_ = *second;
    http_port_ = *PickFreePort();
    data_port_ = *PickFreePort();
    collective_port_ = *PickFreePort();
  }

  std::vector<std::string> Chief(const testing::TestCluster& c, int http_port, const std::string& dir) {
    return {RunfilePath("chief/main"), "--cluster_spec=" + c.spec_path, "--task=chief:0", "--job_name=first",
            "--job=" + RunfilePath("examples/fashion_mnist_mlp.pbtxt"), "--checkpoint_dir=" + tmp_ + "/" + dir,
            "--tensorboard_dir=" + tmp_ + "/" + dir + "-tb", "--summary=" + tmp_ + "/" + dir + ".json",
            absl::StrCat("--http_port=", http_port)};
  }
  std::vector<std::string> Ps(const testing::TestCluster& c, int data_port) {
    return {RunfilePath("ps/server"), "--cluster_spec=" + c.spec_path, "--task=ps:0", "--job_name=" + job_name_,
            "--snapshot_dir=" + tmp_, "--tcp_data_plane=on", absl::StrCat("--data_port=", data_port)};
  }
  std::vector<std::string> Worker(const testing::TestCluster& c, int collective_port) {
    return {RunfilePath("worker/main"), "--cluster_spec=" + c.spec_path, "--task=worker:0", "--device=cpu",
            "--job_name=" + job_name_,
            "--snapshot_dir=" + tmp_, absl::StrCat("--collective_port=", collective_port)};
  }

  std::string tmp_;
  std::string job_name_ = "first";  // of the PS and workers started next
  testing::TestCluster first_, second_;
  int http_port_ = 0, data_port_ = 0, collective_port_ = 0;
};

TEST_F(TwoClustersTest, EveryDaemonRefusesAPortAnotherHoldsAndTheFirstGoesOn) {
  auto chief = MustStart("first chief", Chief(first_, http_port_, "first"), "status page http://");
  auto ps = MustStart("first ps:0", Ps(first_, data_port_), "TCP data plane on port");
  auto worker = MustStart("first worker:0", Worker(first_, collective_port_), "serving at");
  ASSERT_TRUE(chief && ps && worker);

  // The gRPC ports: the second cluster's tasks given the first one's spec.
  ExpectRefused("second chief (gRPC)", Chief(first_, 0, "second"),
                absl::StrCat("cannot listen on ", first_.chief, kInUse));
  ExpectRefused("second ps:0 (gRPC)", Ps(first_, 0), absl::StrCat("cannot listen on ", first_.ps[0], kInUse));
  ExpectRefused("second worker:0 (gRPC)", Worker(first_, 0),
                absl::StrCat("cannot listen on ", first_.workers[0], kInUse));
  // Ports of their own for gRPC, the first's for the rest.
  ExpectRefused("second chief (HTTP)", Chief(second_, http_port_, "second"),
                absl::StrCat("cannot listen for HTTP on 127.0.0.1:", http_port_, kInUse));
  ExpectRefused("second ps:0 (data plane)", Ps(second_, data_port_),
                absl::StrCat("TCP data plane: cannot listen on 127.0.0.1:", data_port_, kInUse));
  ExpectRefused("second worker:0 (collective)", Worker(second_, collective_port_),
                absl::StrCat("cannot listen on 127.0.0.1:", collective_port_, kInUse));

  // The first cluster's daemons still run and answer on their ports.
  ChannelCache channels;
  PsAdmin admin(channels.Get(first_.ps[0]), "ps:0");
  EXPECT_TRUE(admin.Status().ok());
  WorkerControl control(channels.Get(first_.workers[0]), "worker:0");
  EXPECT_TRUE(control.Status().ok());
  ChiefClient chief_client(channels.Get(first_.chief), first_.chief);
  EXPECT_TRUE(chief_client.JobStatus().ok());
  for (Daemon* d : {chief.get(), ps.get(), worker.get()}) EXPECT_TRUE(d->process()->Running());
}

TEST_F(TwoClustersTest, TheChiefRefusesATaskOfAnotherJobByNameAndItExits) {
  auto chief = MustStart("first chief", Chief(first_, 0, "first"), "chief serving at");
  ASSERT_TRUE(chief);
  // The second cluster's spec with the first's chief address (one typo).
  testing::TestCluster mixed = second_;
  mixed.spec_path = tmp_ + "/mixed.json";
  std::ofstream(mixed.spec_path) << "{\"chief\": [\"" << first_.chief << "\"], \"ps\": [\"" << second_.ps[0]
                                 << "\"], \"worker\": [\"" << second_.workers[0] << "\", \"" << second_.workers[1]
                                 << "\"]}\n";
  ExpectRefused("mixed ps:0", Ps(mixed, 0),
                absl::StrCat("ps:0 belongs to another cluster: its cluster spec (digest "));
  EXPECT_TRUE(chief->WaitForLine(absl::StrCat("has ps:0 at ", second_.ps[0], ", this chief's (digest "),
                                 absl::Seconds(1)));
  job_name_ = "second";
  ExpectRefused("second worker:0", Worker(first_, 0),
                "worker:0 belongs to job 'second', but this chief runs job 'first'");

  // The job's own tasks register.
  job_name_ = "first";
  auto ps = MustStart("first ps:0", Ps(first_, 0), "registered with the chief");
  auto worker = MustStart("first worker:0", Worker(first_, 0), "registered with the chief");
  ASSERT_TRUE(ps && worker);
  ChannelCache channels;
  ChiefClient chief_client(channels.Get(first_.chief), first_.chief);
  absl::StatusOr<JobStatusResponse> status = chief_client.JobStatus();
  ASSERT_TRUE(status.ok()) << status.status();
}

}  // namespace
}  // namespace psrt
