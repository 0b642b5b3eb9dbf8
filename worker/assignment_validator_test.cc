#include "worker/assignment_validator.h"

#include "common/plan/job_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

// The MLP example's real assignment on 2 PS, worker 0 of 2.
WorkerAssignment Mlp() {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  EXPECT_TRUE(job.ok()) << job.status();
  absl::StatusOr<JobPlan> plan = PlanJob(*job, 2);
  EXPECT_TRUE(plan.ok()) << plan.status();
  WorkerAssignment a = AssignmentOf(*job, *plan);
  a.set_num_shards(2);
  a.set_shard_index(0);
  a.set_start_step(0);
  a.set_end_step(100);
  return a;
}

AssignmentLimits TwoPs() {
  AssignmentLimits l;
  l.num_ps = 2;
  return l;
}

std::string Refusal(const WorkerAssignment& a) {
  absl::Status s = ValidateAssignment(a, TwoPs());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

std::string APlaceholder(const WorkerAssignment& a) {
  for (const NodeDef& n : a.graph().node()) {
    if (n.op() == "Placeholder") return n.name();
  }
  return "";
}

TEST(AssignmentValidatorTest, TheChiefsAssignmentPasses) {
  EXPECT_TRUE(ValidateAssignment(Mlp(), TwoPs()).ok()) << ValidateAssignment(Mlp(), TwoPs());
}

// Under TLS a worker refuses the ring all-reduce (its gradients would go
// unencrypted) unless --allow_plaintext_collective said that is meant.
TEST(AssignmentValidatorTest, APlaintextRingUnderTlsIsRefusedUnlessAllowed) {
  WorkerAssignment a = Mlp();
  a.mutable_collective()->set_rank(0);
  a.mutable_collective()->set_size(2);
  AssignmentLimits refuse = TwoPs();
  refuse.refuse_plaintext_collective = true;
  absl::Status s = ValidateAssignment(a, refuse);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("assignment.collective: under TLS the ring all-reduce would carry "
                                                  "every gradient unencrypted"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--allow_plaintext_collective"));
  // The parameter-server strategy's assignment has no ring: taken.
  EXPECT_TRUE(ValidateAssignment(Mlp(), refuse).ok());
}

TEST(AssignmentValidatorTest, EachBadFieldIsNamed) {
  WorkerAssignment a = Mlp();
  a.set_loss_node(APlaceholder(a));  // e.g. the label
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.loss_node: \"" + APlaceholder(a) + "\" is a Placeholder"));

  a = Mlp();
  a.add_metric_node("nowhere");
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.metric_node[1]: no node \"nowhere\""));

  a = Mlp();
  a.mutable_input()->set_batch_size(2147483647);
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.input.batch_size: 2147483647 is not in [1, 1048576]"));

  for (int ps : {99, -1}) {
    a = Mlp();
    a.mutable_placement()->mutable_variable(0)->mutable_shard(0)->set_ps_task(ps);
    EXPECT_THAT(Refusal(a), HasSubstr("is not a PS of this cluster (it has 2)"));
  }

  a = Mlp();
  a.set_start_step(int64_t{1} << 62);
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.start_step"));

  a = Mlp();
  a.set_shard_index(2);
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.shard_index: 2 is not in [0, 2)"));

  for (auto [index, batch] : std::vector<std::pair<int, int64_t>>{{2, 0}, {-1, 0}, {0, -5}}) {
    a = Mlp();
    DataStream* d = a.add_stream();
    d->set_index(index);
    d->set_start_batch(batch);
    EXPECT_THAT(Refusal(a), HasSubstr("assignment.stream[0]: stream " + std::to_string(index)));
  }
  a = Mlp();
  a.add_stream()->set_index(1);
  a.add_stream()->set_index(1);
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.stream[1]: stream 1 from batch 0: not a stream of [0, 2)"));

  a = Mlp();
  (*a.mutable_gradient_node())["not_a_variable"] = a.loss_node();
  EXPECT_THAT(Refusal(a), HasSubstr("\"not_a_variable\" is not a Variable node"));
}

// A gradient may be output k of a node with several (LayerNormGrad's and
// BatchNormGrad's dscale and doffset): "node:k" names that node.
TEST(AssignmentValidatorTest, ThePlannersAssignmentCarriesClippingAndABadOneIsNamed) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_mlp.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  job->mutable_optimizer()->set_clipvalue(0.5f);
  absl::StatusOr<JobPlan> plan = PlanJob(*job, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(AssignmentOf(*job, *plan).clip().clipvalue(), 0.5f);

  WorkerAssignment a = Mlp();
  a.mutable_clip()->set_global_clipnorm(1);
  EXPECT_TRUE(ValidateAssignment(a, TwoPs()).ok());
  a.mutable_clip()->set_global_clipnorm(-2);
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.clip.global_clipnorm: -2 is not a finite value >= 0"));
  a.mutable_clip()->set_global_clipnorm(1);
  a.mutable_clip()->set_clipnorm(1);
  EXPECT_THAT(Refusal(a), HasSubstr("assignment.clip.global_clipnorm: set with assignment.clip.clipnorm"));
}

TEST(AssignmentValidatorTest, AGradientMayBeAnOutputOfANodeWithSeveral) {
  absl::StatusOr<TrainingJob> job = LoadJob("examples/fashion_mnist_onnx_vit.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<JobPlan> plan = PlanJob(*job, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  WorkerAssignment a = AssignmentOf(*job, *plan);
  a.set_num_shards(2);
  a.set_end_step(100);
  int outputs = 0;
  for (const auto& [variable, gradient] : a.gradient_node()) outputs += gradient.find(':') != std::string::npos;
  EXPECT_GT(outputs, 0);
  EXPECT_TRUE(ValidateAssignment(a, TwoPs()).ok()) << ValidateAssignment(a, TwoPs());
  (*a.mutable_gradient_node())["norm.bias"] = "no_such_node:2";
  EXPECT_THAT(Refusal(a), HasSubstr("no node \"no_such_node\" in the graph"));
}

TEST(AssignmentValidatorTest, RowShardsMustTileTheirVariable) {
  WorkerAssignment a = Mlp();
  VariablePlacement* vp = a.mutable_placement()->mutable_variable(0);
  const int64_t rows = vp->variable().shape().dim(0);
  vp->clear_shard();
  for (int64_t r = 0; r <= rows; ++r) {  // more shards than rows
    VariablePlacement::Shard* s = vp->add_shard();
    s->set_ps_task(0);
    s->set_row_begin(r);
    s->set_row_end(r + 1);
  }
  EXPECT_THAT(Refusal(a), HasSubstr("shards but has " + std::to_string(rows) + " rows"));

  vp->clear_shard();
  VariablePlacement::Shard* first = vp->add_shard();
  first->set_ps_task(0);
  first->set_row_begin(0);
  first->set_row_end(rows / 2);
  VariablePlacement::Shard* second = vp->add_shard();
  second->set_ps_task(1);
  second->set_row_begin(rows / 2);
  second->set_row_end(rows + 5);  // past the variable
  EXPECT_THAT(Refusal(a), HasSubstr("shard[1]: rows ["));
  second->set_row_end(rows);
  EXPECT_TRUE(ValidateAssignment(a, TwoPs()).ok());
}

TEST(AssignmentValidatorTest, APsThatJoinedBeyondTheSpecIsReachedByTheAssignmentsAddress) {
  WorkerAssignment a = Mlp();
  a.mutable_placement()->mutable_variable(0)->mutable_shard(0)->set_ps_task(2);
  EXPECT_THAT(Refusal(a), HasSubstr("is not a PS of this cluster (it has 2)"));
  auto add = [&a](const std::string& job, int index, const std::string& address) {
    TaskInfo* t = a.add_ps();
    t->mutable_task()->set_job(job);
    t->mutable_task()->set_index(index);
    t->set_address(address);
  };
  add("ps", 0, "ignored:1");  // the spec's address wins
  add("ps", 3, "after-a-gap:1");
  add("worker", 2, "not-a-ps:1");
  EXPECT_THAT(Refusal(a), HasSubstr("(it has 2)"));
  add("ps", 2, "new ps:1");  // not a host:port
  EXPECT_THAT(Refusal(a), HasSubstr("(it has 2)"));
  add("ps", 2, "ps-2.local:2222");
  EXPECT_TRUE(ValidateAssignment(a, TwoPs()).ok()) << ValidateAssignment(a, TwoPs());
  EXPECT_EQ(PsAddresses(a, {"a:1", "b:1"}), (std::vector<std::string>{"a:1", "b:1", "ps-2.local:2222", "after-a-gap:1"}));
}

}  // namespace
}  // namespace psrt
