#include "worker/mirrored_client.h"

#include <cstring>
#include <thread>

#include "common/collective/local_collective.h"
#include "google/protobuf/text_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

CreateVariablesRequest Variables() {
  CreateVariablesRequest req;
  google::protobuf::TextFormat::ParseFromString(R"(
    variable { name: "w" dtype: DT_FLOAT shape { dim: 3 dim: 2 } initializer { kind: GLOROT_UNIFORM } }
    variable { name: "b" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ZEROS } }
    optimizer {
      adam { learning_rate: 0.01 }
      # Warm-up, decay and floor within the tests' 20 steps: the rate follows
      # each replica's own update count, the same on every replica.
      schedule { kind: COSINE warmup_steps: 5 decay_steps: 10 min_fraction: 0.1 }
    }
    num_workers: 1)", &req);
  return req;
}

// N replicas, each with its own store and client, sharing one in-process group.
struct Group {
  explicit Group(int n, absl::Duration timeout = absl::Seconds(10)) {
    std::vector<std::unique_ptr<Collective>> ranks = LocalCollectiveGroup::Create(n, timeout);
    for (int i = 0; i < n; ++i) {
      ServerCoreOptions o;
      o.task_index = i;
      stores.push_back(std::make_unique<ParameterServerCore>(o));
      EXPECT_TRUE(stores.back()->CreateVariables(Variables()).ok());
      auto rank = std::make_shared<std::unique_ptr<Collective>>(std::move(ranks[i]));
      raw.push_back(rank->get());
      clients.push_back(std::make_unique<MirroredClient>(
          stores.back().get(), [rank]() -> absl::StatusOr<std::unique_ptr<Collective>> {
            if (*rank == nullptr) return absl::FailedPreconditionError("formed twice");
            return std::move(*rank);
          }));
    }
  }
  std::vector<std::unique_ptr<ParameterServerCore>> stores;
  std::vector<Collective*> raw;
  std::vector<std::unique_ptr<MirroredClient>> clients;
};

RequestId Id(int worker, int64_t step) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(7);
  id.set_step(step);
  return id;
}

// Rank r's gradients at step s: different on every rank and step.
TensorMap Gradients(int r, int64_t s) {
  std::vector<float> w(6), b(2);
  for (int i = 0; i < 6; ++i) w[i] = 0.1f * (r + 1) * (i - 2.5f) + 0.01f * s;
  for (int i = 0; i < 2; ++i) b[i] = 0.3f * (r - 1) + 0.02f * s * i;
  return {{"w", Tensor::FromVector<float>(w, TensorShape({3, 2}))},
          {"b", Tensor::FromVector<float>(b, TensorShape({2}))}};
}

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes());
}

TEST(MirroredClientTest, ReplicasStayBitIdenticalAndApplyTheMean) {
  const int n = 3, steps = 20;
  Group g(n);
  std::vector<std::thread> threads;
  std::vector<absl::Status> failures(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (int64_t s = 0; s < steps; ++s) {
        absl::StatusOr<TensorMap> pulled = g.clients[r]->Pull({"w", "b"}, s);
        absl::StatusOr<bool> pause = g.clients[r]->PushAgreeing(Id(r, s), Gradients(r, s), {}, false);
        if (!pulled.ok() || !pause.ok() || *pause) {
          failures[r] = !pulled.ok() ? pulled.status() : pause.ok() ? absl::InternalError("paused") : pause.status();
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(failures[r].ok()) << r << ": " << failures[r];

  // A single store fed the mean of the ranks' gradients by hand ends the same.
  ServerCoreOptions o;
  ParameterServerCore reference(o);
  ASSERT_TRUE(reference.CreateVariables(Variables()).ok());
  LocalPsClient ref(&reference, 0);
  for (int64_t s = 0; s < steps; ++s) {
    TensorMap mean = Gradients(0, s);
    for (auto& [name, t] : mean) {
      float* d = t.data<float>();
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += Gradients(r, s)[name].data<float>()[i];
        d[i] = sum * (1.0f / n);
      }
    }
    ASSERT_TRUE(ref.Push(Id(0, s), mean, {}).ok());
  }
  absl::StatusOr<TensorMap> want = ref.Pull({"w", "b"}, steps);
  ASSERT_TRUE(want.ok());
  absl::StatusOr<TensorMap> first = g.clients[0]->Pull({"w", "b"}, steps);
  ASSERT_TRUE(first.ok());
  for (int r = 1; r < n; ++r) {
    absl::StatusOr<TensorMap> other = g.clients[r]->Pull({"w", "b"}, steps);
    ASSERT_TRUE(other.ok());
    for (const char* v : {"w", "b"}) EXPECT_EQ(Bytes(other->at(v)), Bytes(first->at(v))) << "rank " << r << " " << v;
  }
  for (const char* v : {"w", "b"}) {
    for (int64_t i = 0; i < want->at(v).NumElements(); ++i) {
      EXPECT_NEAR(first->at(v).data<float>()[i], want->at(v).data<float>()[i], 1e-6) << v << "[" << i << "]";
    }
  }
}

TEST(MirroredClientTest, OneMembersPauseStopsTheWholeGroupAfterTheSameStep) {
  const int n = 2;
  Group g(n);
  std::vector<std::vector<bool>> agreed(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (int64_t s = 0; s < 5; ++s) {
        absl::StatusOr<bool> p = g.clients[r]->PushAgreeing(Id(r, s), Gradients(r, s), {}, r == 1 && s == 3);
        agreed[r].push_back(p.ok() && *p);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(agreed[r], std::vector<bool>({false, false, false, true, false})) << "rank " << r;
  }
}

TEST(MirroredClientTest, ABrokenGroupFailsEveryLaterPushWithUnavailable) {
  Group g(2, absl::Milliseconds(200));
  // Rank 1 never arrives: rank 0's all-reduce times out.
  absl::StatusOr<bool> p = g.clients[0]->PushAgreeing(Id(0, 0), Gradients(0, 0), {}, false);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("all-reduce of step 0"));
  // Nothing was applied, and the group stays broken.
  absl::Status again = g.clients[0]->Push(Id(0, 1), Gradients(0, 1), {});
  EXPECT_EQ(again.code(), absl::StatusCode::kUnavailable);
}

TEST(MirroredClientTest, SparseGradientsAreRefusedNamingTheVariable) {
  Group g(1);
  std::map<std::string, std::pair<Tensor, Tensor>> sparse;
  sparse["emb"] = {Tensor::FromVector<int64_t>({1}, TensorShape({1})),
                   Tensor::FromVector<float>({1, 2}, TensorShape({1, 2}))};
  absl::Status s = g.clients[0]->Push(Id(0, 0), {}, sparse);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("emb"));
}

}  // namespace
}  // namespace psrt
