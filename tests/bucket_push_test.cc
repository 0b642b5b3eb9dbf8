// Bucketed push (worker --push_bucket_bytes) across real processes: two
// PS, the MLP trained from scratch once with each step pushed whole and
// once in parts sent during the backward pass; the final checkpoints must
// hold exactly the same parameters. ASYNC with one worker (no pull
// overlapping a push, so the order of updates is fixed) and SYNC with two
// workers (each PS sums two gradients per variable per step, and a sum of
// two floats is the same in either order).
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_variables.h"
#include "gtest/gtest.h"
#include "tests/harness/training_cluster.h"

namespace psrt {
namespace {

using testing::Daemon;

class BucketPushTest : public testing::TrainingClusterTest {
 protected:
  // Trains the job from scratch with `worker_flags` on every worker; the
  // variables of its final checkpoint (empty after a failure).
  std::map<std::string, Tensor> Train(const std::string& leg, int workers,
                                      const std::vector<std::string>& worker_flags, bool bucketed) {
    job_.mutable_checkpoint()->set_dir(absl::StrCat(dir_, "/", leg));
    job_.mutable_checkpoint()->set_every_steps(job_.steps());
    WriteJob();
    std::vector<std::unique_ptr<Daemon>> ps, ws;
    for (int i = 0; i < 2; ++i) ps.push_back(StartPs(i));
    for (int i = 0; i < workers; ++i) ws.push_back(StartWorker(i, worker_flags));
    auto chief = StartChief();
    if (chief == nullptr) return {};
    if (bucketed) {
      for (auto& w : ws) EXPECT_TRUE(w->WaitForLine("pushes in buckets of", absl::Minutes(2))) << leg;
    }
    EXPECT_EQ(ExitCode(chief.get()), 0) << leg;
    for (auto& w : ws) EXPECT_EQ(ExitCode(w.get()), 0) << leg;
    absl::StatusOr<CheckpointVariables> vars = ReadCheckpointVariables(job_.checkpoint().dir(), -1, job_);
    EXPECT_TRUE(vars.ok()) << leg << ": " << vars.status();
    if (!vars.ok()) return {};
    EXPECT_EQ(vars->step, job_.steps()) << leg;
    return vars->values;
  }

  void ExpectSame(const std::map<std::string, Tensor>& whole, const std::map<std::string, Tensor>& parts) {
    ASSERT_FALSE(whole.empty());
    ASSERT_EQ(whole.size(), parts.size());
    for (const auto& [name, t] : whole) {
      auto it = parts.find(name);
      ASSERT_NE(it, parts.end()) << name;
      ASSERT_EQ(t.shape(), it->second.shape()) << name;
      EXPECT_EQ(std::memcmp(t.raw_data(), it->second.raw_data(), t.TotalBytes()), 0)
          << name << " differs between the whole and the bucketed push";
    }
  }
};

// Buckets of 4 KiB: the 784x256 kernel's PS gets it in the last part, the
// other PS its layers in several parts.
TEST_F(BucketPushTest, AsyncOneWorkerTrainsExactlyAsWithWholePushes) {
  Setup(2, 1, ConsistencyDef::ASYNC, 60);
  auto whole = Train("whole", 1, {"--overlap_pull=false", "--push_bucket_bytes=0"}, false);
  auto parts = Train("parts", 1, {"--overlap_pull=false", "--push_bucket_bytes=4096"}, true);
  ExpectSame(whole, parts);
}

TEST_F(BucketPushTest, SyncTwoWorkersTrainExactlyAsWithWholePushes) {
  Setup(2, 2, ConsistencyDef::SYNC, 40);
  auto whole = Train("whole", 2, {"--push_bucket_bytes=0"}, false);
  auto parts = Train("parts", 2, {"--push_bucket_bytes=4096"}, true);
  ExpectSame(whole, parts);
}

}  // namespace
}  // namespace psrt
