#include "worker/worker_metrics.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

// Answers pulls with a [10, 4] float tensor per variable; fails pushes
// when told; lockstep as told.
class FakeClient : public ParameterClient {
 public:
  bool fail_push = false;
  bool lock = false;
  int generation_calls = 0;
  absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& variables, int64_t step) override {
    TensorMap m;
    for (const std::string& v : variables) m[v] = Tensor(DT_FLOAT, TensorShape({10, 4}));
    return m;
  }
  absl::StatusOr<TensorMap> PullRows(const RowRequest& rows, int64_t step) override {
    return absl::UnavailableError("ps:0 is down");
  }
  absl::Status Push(const RequestId& id, const TensorMap& dense,
                    const std::map<std::string, std::pair<Tensor, Tensor>>& sparse) override {
    return fail_push ? absl::UnavailableError("ps:0 is down") : absl::OkStatus();
  }
  void SetGeneration(int64_t generation) override { ++generation_calls; }
  bool lockstep() const override { return lock; }
};

class FakeRunner : public StepRunner {
 public:
  std::vector<std::string> DenseVariables() const override { return {"w"}; }
  absl::StatusOr<RowRequest> SparseRows(const Batch& batch) const override { return RowRequest(); }
  absl::StatusOr<StepResult> Run(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                 int64_t step) override {
    StepResult r;
    r.loss = 0.5f;
    r.metrics["accuracy"] = 0.75f;
    return r;
  }
  std::string device() const override { return "cpu"; }
};

TEST(WorkerMetrics, CountsPullsPushesAndComputeAndForwardsTheRest) {
  auto metrics = std::make_shared<WorkerMetrics>();
  auto fake = std::make_unique<FakeClient>();
  FakeClient* raw = fake.get();
  raw->lock = true;
  std::unique_ptr<ParameterClient> client = MeterClient(std::move(fake), metrics);
  ASSERT_TRUE(client->Pull({"a", "b"}, 0).ok());
  EXPECT_FALSE(client->PullRows({}, 0).ok());
  TensorMap grads = {{"a", Tensor(DT_FLOAT, TensorShape({10, 4}))}};
  EXPECT_TRUE(client->Push(RequestId(), grads, {}).ok());
  raw->fail_push = true;
  EXPECT_FALSE(client->PushAgreeing(RequestId(), grads, {}, false).ok());
  client->SetGeneration(3);
  EXPECT_EQ(raw->generation_calls, 1);
  EXPECT_TRUE(client->lockstep());
  EXPECT_EQ(client->StartBucketedPush(RequestId(), 1024), nullptr);  // the fake cannot

  std::unique_ptr<StepRunner> runner = MeterRunner(std::make_unique<FakeRunner>(), metrics);
  EXPECT_EQ(runner->device(), "cpu");
  ASSERT_TRUE(runner->Run({}, {}, Batch(), 0).ok());

  EXPECT_EQ(metrics->pull.calls, 1);
  EXPECT_EQ(metrics->pull.bytes, 2 * 40 * 4);
  EXPECT_EQ(metrics->pull_rows.calls, 1);
  EXPECT_EQ(metrics->pull_rows.errors, 1);
  EXPECT_EQ(metrics->push.calls, 2);
  EXPECT_EQ(metrics->push.errors, 1);
  EXPECT_EQ(metrics->push.bytes, 2 * 40 * 4);
  EXPECT_EQ(metrics->compute.count(), 1);

  WorkerStatusResponse status;
  status.set_state(WorkerStatusResponse::RUNNING);
  status.set_step(7);
  EXPECT_EQ(WorkerMetricsText(*metrics, status, {{"task", "worker:1"}}).find("psrt_worker_role"), std::string::npos)
      << "a role before any assignment";
  WorkerAssignment a;  // rank 1 of a group of 2, with 2 local devices, an embedding table on ps:0
  a.add_ps();
  a.mutable_collective()->set_rank(1);
  a.mutable_collective()->set_size(2);
  a.set_local_devices(2);
  a.mutable_placement()->add_variable()->add_shard()->set_ps_task(0);
  a.mutable_placement()->add_variable()->add_shard()->set_ps_task(1);  // the replica's own store
  RecordAssignment(*metrics, a);
  const std::string text = WorkerMetricsText(*metrics, status, {{"task", "worker:1"}});
  for (const char* line : {"psrt_worker_step{task=\"worker:1\"} 7\n",
                           "psrt_worker_state{task=\"worker:1\",state=\"RUNNING\"} 1\n",
                           "psrt_worker_loss{task=\"worker:1\"} 0.5\n",
                           "psrt_worker_train_metric{task=\"worker:1\",name=\"accuracy\"} 0.75\n",
                           "psrt_worker_requests_total{task=\"worker:1\",method=\"push\"} 2\n",
                           "psrt_worker_request_errors_total{task=\"worker:1\",method=\"pull_rows\"} 1\n",
                           "psrt_worker_request_seconds_count{task=\"worker:1\",method=\"pull\"} 1\n",
                           "psrt_worker_compute_seconds_count{task=\"worker:1\"} 1\n",
                           "psrt_worker_role{task=\"worker:1\",strategy=\"hybrid\"} 1\n",
                           "psrt_worker_collective_rank{task=\"worker:1\"} 1\n",
                           "psrt_worker_collective_size{task=\"worker:1\"} 2\n",
                           "psrt_worker_local_devices{task=\"worker:1\"} 2\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  a.mutable_placement()->mutable_variable(0)->mutable_shard(0)->set_ps_task(1);
  RecordAssignment(*metrics, a);
  EXPECT_NE(WorkerMetricsText(*metrics, status, {{"task", "worker:1"}})
                .find("psrt_worker_role{task=\"worker:1\",strategy=\"collective\"} 1\n"),
            std::string::npos);
  RecordAssignment(*metrics, WorkerAssignment());
  const std::string ps = WorkerMetricsText(*metrics, status, {{"task", "worker:1"}});
  EXPECT_NE(ps.find("psrt_worker_role{task=\"worker:1\",strategy=\"parameter_server\"} 1\n"), std::string::npos);
  EXPECT_NE(ps.find("psrt_worker_collective_rank{task=\"worker:1\"} -1\n"), std::string::npos) << ps;
}

}  // namespace
}  // namespace psrt
