// The job's strategy against its cluster and model (CheckStrategy, PlanJob).
#include "common/plan/job_planner.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

TrainingJob Job(const std::string& strategy) {
  absl::StatusOr<TrainingJob> job = ParseJob(absl::StrCat(R"(
    model { sequential { layer { dense { units: 4 } } } loss { kind: MEAN_SQUARED_ERROR } }
    input { format: CSV batch_size: 8 train { files: "/nonexistent.csv" } feature { name: "x" shape: 3 } }
    optimizer { sgd { learning_rate: 0.1 } }
    steps: 10 )", strategy), "job");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

std::string Refusal(const TrainingJob& job, int ps, int workers) {
  absl::Status s = CheckStrategy(job, ps, workers);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(StrategyTest, EachStrategyIsCheckedAgainstItsCluster) {
  EXPECT_TRUE(CheckStrategy(Job(""), 2, 2).ok());
  EXPECT_THAT(Refusal(Job(""), 0, 2), HasSubstr("job.strategy: parameter_server (the default) needs at least one ps"));
  const TrainingJob mwm = Job("strategy { multi_worker_mirrored {} }");
  EXPECT_TRUE(CheckStrategy(mwm, 0, 3).ok());
  EXPECT_TRUE(CheckStrategy(Job("strategy { multi_worker_mirrored {} } failure { min_workers: 3 }"), 0, 3).ok());
  EXPECT_THAT(Refusal(Job("strategy { multi_worker_mirrored {} } failure { min_workers: 4 }"), 0, 3),
              HasSubstr("job.failure.min_workers: 4 is not in [0, 3]"));
  EXPECT_THAT(Refusal(Job("failure { min_workers: -1 }"), 1, 2), HasSubstr("job.failure.min_workers: -1"));
  EXPECT_THAT(Refusal(mwm, 1, 2), HasSubstr("job.strategy.multi_worker_mirrored: the cluster has 1 ps tasks"));
  const TrainingJob mirrored = Job("strategy { mirrored { devices: 3 } }");
  EXPECT_TRUE(CheckStrategy(mirrored, 0, 1).ok());
  EXPECT_EQ(LocalDevices(mirrored), 3);
  EXPECT_THAT(Refusal(mirrored, 0, 2), HasSubstr("job.strategy.mirrored: runs on one worker, the cluster has 2"));
  EXPECT_THAT(Refusal(Job("strategy { central_storage { devices: 65 } }"), 0, 1),
              HasSubstr("job.strategy.central_storage.devices: 65 is not in [1, 64]"));
  EXPECT_THAT(Refusal(Job("strategy { multi_worker_mirrored { collective_timeout_ms: -1 } }"), 0, 2),
              HasSubstr("collective_timeout_ms: negative"));
  EXPECT_EQ(LocalDevices(Job("strategy { central_storage {} }")), 2);
  EXPECT_EQ(LocalDevices(mwm), 1);
  EXPECT_FALSE(IsMirrored(Job("")));
  const TrainingJob hybrid = Job("strategy { hybrid {} }");
  EXPECT_TRUE(CheckStrategy(hybrid, 2, 2).ok());
  EXPECT_TRUE(IsCollective(hybrid));
  EXPECT_FALSE(IsMirrored(hybrid));
  EXPECT_THAT(Refusal(hybrid, 0, 2), HasSubstr("job.strategy.hybrid: needs at least one ps task"));
  // A hybrid model needs an embedding to keep on the PS.
  absl::Status none = PlanJob(hybrid, 2).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.message()), HasSubstr("job.strategy.hybrid: the model has no embedding"));
}

TEST(StrategyTest, MaxWorkersIsCheckedAgainstTheClusterAndStrategy) {
  EXPECT_TRUE(CheckStrategy(Job("failure { max_workers: 4 }"), 2, 2).ok());
  EXPECT_TRUE(CheckStrategy(Job("failure { max_workers: 2 }"), 2, 2).ok());
  EXPECT_THAT(Refusal(Job("failure { max_workers: 1 }"), 2, 2),
              HasSubstr("job.failure.max_workers: 1 is not in [2 (the cluster's workers), 1024]"));
  EXPECT_THAT(Refusal(Job("failure { max_workers: 100000 }"), 2, 2), HasSubstr("job.failure.max_workers: 100000"));
  EXPECT_THAT(Refusal(Job("strategy { multi_worker_mirrored {} } failure { max_workers: 4 }"), 0, 2),
              HasSubstr("need the parameter-server strategy, not multi_worker_mirrored"));
}

TEST(StrategyTest, ReplicationIsCheckedAndPlacesEachShardsBackupOnTheNextPs) {
  const TrainingJob replicated = Job("replication { factor: 2 }");
  EXPECT_TRUE(CheckStrategy(replicated, 2, 2).ok());
  EXPECT_EQ(ReplicationFactor(replicated), 2);
  EXPECT_EQ(ReplicationFactor(Job("")), 1);
  EXPECT_THAT(Refusal(replicated, 1, 2),
              HasSubstr("job.replication.factor: 2 needs at least 2 ps tasks (a backup on another PS), the cluster has 1"));
  EXPECT_THAT(Refusal(Job("replication { factor: 3 }"), 3, 2), HasSubstr("job.replication.factor: 3 is not 1 or 2"));
  EXPECT_THAT(Refusal(Job("replication { factor: -1 }"), 3, 2), HasSubstr("job.replication.factor: -1"));
  EXPECT_THAT(Refusal(Job("strategy { multi_worker_mirrored {} } replication { factor: 2 }"), 0, 2),
              HasSubstr("only the parameter_server strategy"));
  // Every shard (here the layer's kernel, partitioned by rows over 3 PS,
  // and its bias) has its backup on the PS after its primary.
  TrainingJob split = Job("replication { factor: 2 } partition_threshold_bytes: 8");
  absl::StatusOr<JobPlan> plan = PlanJob(split, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int shards = 0;
  for (const VariablePlacement& vp : plan->placement.variable()) {
    for (const VariablePlacement::Shard& s : vp.shard()) {
      EXPECT_EQ(s.backup_ps_task(), (s.ps_task() + 1) % 3) << vp.variable().name();
      ++shards;
    }
  }
  EXPECT_GE(shards, 4);
}

TEST(StrategyTest, MirroredPlansPutEveryVariableWholeOnTheReplicaAndRefuseEmbeddings) {
  TrainingJob job = Job("strategy { multi_worker_mirrored {} }");
  absl::StatusOr<JobPlan> plan = PlanJob(job, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const VariablePlacement& vp : plan->placement.variable()) {
    ASSERT_EQ(vp.shard_size(), 1) << vp.variable().name();
    EXPECT_EQ(vp.shard(0).ps_task(), 0) << vp.variable().name();
  }
  absl::StatusOr<TrainingJob> sparse = ParseJob(R"(
    strategy { mirrored {} }
    model { sequential { layer { embedding_bag { input_dim: 100 output_dim: 4 } } layer { dense { units: 1 } } }
            loss { kind: MEAN_SQUARED_ERROR } }
    input { format: LIBSVM batch_size: 8 train { files: "/nonexistent.txt" } feature { name: "ids" kind: SPARSE } }
    optimizer { sgd { learning_rate: 0.1 } }
    steps: 10 )", "job");
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  absl::Status s = PlanJob(*sparse, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("job.strategy.mirrored: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("is an embedding table"));
  // Hybrid: the table on the PS (0, 1), the dense layer on store 2, the
  // workers' replicas.
  sparse->mutable_strategy()->mutable_hybrid();
  absl::StatusOr<JobPlan> hybrid = PlanJob(*sparse, 2);
  ASSERT_TRUE(hybrid.ok()) << hybrid.status();
  for (const VariablePlacement& vp : hybrid->placement.variable()) {
    if (vp.variable().kind() == VariableDef::DENSE) {
      EXPECT_EQ(vp.shard(0).ps_task(), 2) << vp.variable().name();
    } else {
      EXPECT_LT(vp.shard(0).ps_task(), 2) << vp.variable().name();
    }
  }
}

}  // namespace
}  // namespace psrt
