// ChiefCluster::AssignmentFor: what the chief's Start carries to a worker.
#include "chief/chief_cluster.h"

#include <cstdlib>

#include "common/plan/job_planner.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(ChiefClusterTest, TheAssignmentCarriesTheOptimizersClipping) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromJson(R"({"chief": ["localhost:1"], "ps": ["localhost:2"], "worker": ["localhost:3"]})", "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  TaskRegistry registry(*spec, absl::Seconds(10));
  ChannelCache channels;
  for (const float global_clipnorm : {0.0f, 1.25f}) {
    CoordinatorOptions o;
    o.job = *job;
    o.job.mutable_optimizer()->set_global_clipnorm(global_clipnorm);
    o.cluster = *spec;
    o.checkpoint_dir = std::string(std::getenv("TEST_TMPDIR")) + "/ckpt";
    ChiefCluster cluster(o, &registry, &channels);
    const WorkerAssignment a = cluster.AssignmentFor(0, 0);
    EXPECT_EQ(a.clip().global_clipnorm(), global_clipnorm);
    EXPECT_EQ(a.clip().clipnorm(), 0);
    EXPECT_EQ(a.clip().clipvalue(), 0);
  }
}

}  // namespace
}  // namespace psrt
