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

// Early stopping (#25): a shorter end changes where workers stop, not the
// schedule the stores apply; the decision is kept in the job state.
TEST(ChiefClusterTest, AnEarlyEndKeepsTheSchedulesLengthAndIsSaved) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(
      R"({"chief": ["localhost:1"], "ps": ["localhost:2"], "worker": ["localhost:3", "localhost:4"]})", "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  TaskRegistry registry(*spec, absl::Seconds(10));
  ChannelCache channels;
  CoordinatorOptions o;
  o.job = *job;
  o.cluster = *spec;
  o.checkpoint_dir = std::string(std::getenv("TEST_TMPDIR")) + "/early";
  ChiefCluster cluster(o, &registry, &channels);
  cluster.end_step = cluster.job_steps = 7035;
  const OptimizerDef before = cluster.StoreOptimizer();
  EXPECT_EQ(before.schedule().decay_steps(), 7035 * 2);  // ASYNC: every worker's pushes
  EXPECT_EQ(cluster.ResumeEndStep(100), 0);              // not stopped: unchanged
  EXPECT_EQ(cluster.AssignmentFor(0, 100).end_step(), 7035);

  cluster.end_step = cluster.stopped_early_at_step = 409;
  EXPECT_EQ(cluster.StoreOptimizer().schedule().decay_steps(), before.schedule().decay_steps());
  EXPECT_EQ(cluster.AssignmentFor(0, 100).end_step(), 409);
  EXPECT_EQ(cluster.AssignmentFor(0, 500).end_step(), 500);  // past the end: runs nothing
  EXPECT_EQ(cluster.ResumeEndStep(100), 409);
  EXPECT_EQ(cluster.ResumeEndStep(500), 500);
  cluster.SaveJobState(true);
  absl::StatusOr<ChiefJobState> state = cluster.manifests.ReadJobState();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(state->has_stopped_early_at_step());
  EXPECT_EQ(state->stopped_early_at_step(), 409);
}

// The steps rolled back are kept in the job state with the failures, so a
// chief taking over counts on from them (#27: the summary had counted only
// the last chief's own).
TEST(ChiefClusterTest, RolledBackStepsAreSavedWithTheJobState) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromJson(R"({"chief": ["localhost:1"], "ps": ["localhost:2"], "worker": ["localhost:3"]})", "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  TaskRegistry registry(*spec, absl::Seconds(10));
  ChannelCache channels;
  CoordinatorOptions o;
  o.job = *job;
  o.cluster = *spec;
  o.checkpoint_dir = std::string(std::getenv("TEST_TMPDIR")) + "/rolled";
  ChiefCluster cluster(o, &registry, &channels);
  cluster.summary.rolled_back_steps = 302;
  cluster.CountFailure();
  absl::StatusOr<ChiefJobState> state = cluster.manifests.ReadJobState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->rolled_back_steps(), 302);
  EXPECT_EQ(state->failures_survived(), 1);
  EXPECT_TRUE(state->running());
}

}  // namespace
}  // namespace psrt
