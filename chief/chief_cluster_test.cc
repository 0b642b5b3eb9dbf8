// ChiefCluster: what the chief's Start carries to a worker (AssignmentFor),
// and what it keeps in the job state for the chief after it.
#include "chief/chief_cluster.h"

#include <cstdlib>

#include "common/plan/job_planner.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr char kOneWorker[] = R"({"chief": ["localhost:1"], "ps": ["localhost:2"], "worker": ["localhost:3"]})";

// The MLP example's job on the cluster `spec_json` (no task of it runs),
// its checkpoints under $TEST_TMPDIR/`dir`.
CoordinatorOptions MlpOptions(const std::string& spec_json, const std::string& dir) {
  CoordinatorOptions o;
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  EXPECT_TRUE(job.ok()) << job.status();
  if (job.ok()) o.job = *job;
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromJson(spec_json, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (spec.ok()) o.cluster = *spec;
  o.checkpoint_dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + dir;
  return o;
}

TEST(ChiefClusterTest, TheAssignmentCarriesTheOptimizersClipping) {
  const CoordinatorOptions base = MlpOptions(kOneWorker, "ckpt");
  TaskRegistry registry(base.cluster, absl::Seconds(10));
  ChannelCache channels;
  for (const float global_clipnorm : {0.0f, 1.25f}) {
    CoordinatorOptions o = base;
    o.job.mutable_optimizer()->set_global_clipnorm(global_clipnorm);
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
  const CoordinatorOptions o = MlpOptions(
      R"({"chief": ["localhost:1"], "ps": ["localhost:2"], "worker": ["localhost:3", "localhost:4"]})", "early");
  TaskRegistry registry(o.cluster, absl::Seconds(10));
  ChannelCache channels;
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
  const CoordinatorOptions o = MlpOptions(kOneWorker, "rolled");
  TaskRegistry registry(o.cluster, absl::Seconds(10));
  ChannelCache channels;
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
