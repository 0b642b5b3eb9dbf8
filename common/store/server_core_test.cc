#include "common/store/server_core.h"

#include <filesystem>
#include <functional>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/store/push_part_id.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

CreateVariablesRequest Create(const std::string& mode, int workers, int staleness = 0) {
  CreateVariablesRequest req;
  google::protobuf::TextFormat::ParseFromString(R"(
    variable { name: "w" dtype: DT_FLOAT shape { dim: 2 } initializer { kind: ZEROS } }
    variable { name: "emb" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 } initializer { kind: ZEROS } }
    optimizer { sgd { learning_rate: 1 } })", &req);
  ConsistencyDef::Mode m = ConsistencyDef::ASYNC;
  ConsistencyDef::Mode_Parse(mode, &m);
  req.mutable_consistency()->set_mode(m);
  req.mutable_consistency()->set_staleness(staleness);
  req.set_num_workers(workers);
  return req;
}

RequestId Id(int worker, int64_t step, uint64_t inc = 1) {
  RequestId id;
  id.set_worker(worker);
  id.set_worker_incarnation(inc);
  id.set_step(step);
  return id;
}

CreateVariablesRequest CreateAt(const std::string& mode, int workers, int64_t generation) {
  CreateVariablesRequest req = Create(mode, workers);
  req.set_generation(generation);
  return req;
}

RequestId IdAt(int worker, int64_t step, int64_t generation) {
  RequestId id = Id(worker, step);
  id.set_generation(generation);
  return id;
}

NamedTensors Grad(float a, float b) {
  return {{"w", Tensor::FromVector<float>({a, b}, TensorShape({2}))}};
}

// The first two floats of the first tensor a pull answers, synchronously
// (`issue` starts the pull; its callback may run on another thread).
absl::StatusOr<std::vector<float>> Await(const std::function<void(ParameterServerCore::PullDone)>& issue) {
  absl::Notification done;
  absl::Status status;
  std::vector<float> out;
  issue([&](absl::Status s, NamedTensors t, int64_t) {
    status = s;
    if (s.ok()) out.assign(t[0].second.data<float>(), t[0].second.data<float>() + 2);
    done.Notify();
  });
  done.WaitForNotification();
  if (!status.ok()) return status;
  return out;
}

// Pull dense variable `name` (default "w") synchronously.
absl::StatusOr<std::vector<float>> PullW(ParameterServerCore* ps, int worker, int64_t step,
                                         absl::Duration wait = absl::Seconds(10), const std::string& name = "w") {
  return Await(
      [&](ParameterServerCore::PullDone done) { ps->Pull({name}, worker, step, absl::Now() + wait, std::move(done)); });
}

// Pull one row of table `name` synchronously.
absl::StatusOr<std::vector<float>> PullRow(ParameterServerCore* ps, const std::string& name, int64_t id) {
  return Await([&](ParameterServerCore::PullDone done) {
    ps->PullRows({{name, Tensor::FromVector<int64_t>({id}, TensorShape({1}))}}, -1, 0, absl::InfiniteFuture(),
                 std::move(done));
  });
}

ServerCoreOptions Options() {
  ServerCoreOptions o;
  o.incarnation = 42;
  o.snapshot_root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/snapshots");
  return o;
}

TEST(ServerCoreTest, AsyncAppliesAtOnceAndRetriesOnce) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 2)).ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), Grad(1, 2)).ok());
  auto again = ps.Push(Id(0, 0), Grad(1, 2));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->duplicate());
  // A restarted worker (new incarnation) pushing the same step is new.
  ASSERT_FALSE(ps.Push(Id(0, 0, 2), Grad(1, 1))->duplicate());
  EXPECT_EQ(*PullW(&ps, 0, 5), (std::vector<float>{-2, -3}));
  EXPECT_EQ(ps.Status().global_step(), 2);
}

RequestId WithData(RequestId id, int stream, int64_t batch) {
  id.set_has_data(true);
  id.set_data_stream(stream);
  id.set_data_batch(batch);
  return id;
}

// A worker killed between two PS's pushes of a step is started again at
// it: the PS that took its batch answers the new incarnation's push
// "duplicate", whoever pushes it (a membership change gives the stream to
// another worker), across a new generation; a restore or a fresh start
// forgets it.
TEST(ServerCoreTest, AsyncTakesEachBatchOfAStreamOnce) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("ASYNC", 2, 1)).ok());
  ASSERT_FALSE(ps.Push(WithData(IdAt(0, 0, 1), 3, 7), Grad(1, 2))->duplicate());
  EXPECT_EQ(ps.Status().stream_next_batch().at(3), 8);
  RequestId again = WithData(IdAt(0, 0, 1), 3, 7);
  again.set_worker_incarnation(2);
  EXPECT_TRUE(ps.Push(again, Grad(1, 2))->duplicate());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("ASYNC", 2, 2)).ok());  // a membership change
  EXPECT_TRUE(ps.Push(WithData(IdAt(1, 40, 2), 3, 7), Grad(1, 2))->duplicate());
  EXPECT_FALSE(ps.Push(WithData(IdAt(1, 41, 2), 3, 8), Grad(1, 2))->duplicate());
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-2, -4}));
  EXPECT_FALSE(ps.Push(WithData(IdAt(1, 42, 2), -1, 8), Grad(1, 2)).ok());  // a negative stream
  EXPECT_FALSE(ps.Push(WithData(IdAt(1, 42, 2), 3, -8), Grad(1, 2)).ok());  // a negative batch
  EXPECT_FALSE(ps.Push(WithData(IdAt(1, 42, 2), 1 << 16, 8), Grad(1, 2)).ok());  // past the streams a job has
  EXPECT_EQ(ps.Status().stream_next_batch().size(), 1u);  // refused pushes name no stream
  CreateVariablesRequest fresh = CreateAt("ASYNC", 2, 3);
  fresh.set_reinitialize(true);
  ASSERT_TRUE(ps.CreateVariables(fresh).ok());
  EXPECT_TRUE(ps.Status().stream_next_batch().empty());
  EXPECT_FALSE(ps.Push(WithData(IdAt(0, 0, 3), 3, 7), Grad(1, 2))->duplicate());
}

// Rows of a batch travel with its dense gradients (Push carries both; the
// service applies the rows through PushRows first): a new incarnation
// pushing again a batch this PS took applies none of its rows either.
TEST(ServerCoreTest, AsyncTakesEachBatchsRowsOnce) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("ASYNC", 1, 1)).ok());
  Tensor ids = Tensor::FromVector<int64_t>({3}, TensorShape({1}));
  std::vector<SparseUpdate> rows = {{"emb", ids, Tensor::FromVector<float>({1, 2}, TensorShape({1, 2}))}};
  const RequestId first = WithData(IdAt(0, 0, 1), 0, 5);
  ASSERT_FALSE(ps.PushRows(first, rows)->duplicate());
  ASSERT_FALSE(ps.Push(first, Grad(1, 1))->duplicate());
  RequestId again = first;
  again.set_worker_incarnation(2);
  EXPECT_TRUE(ps.PushRows(again, rows)->duplicate());
  EXPECT_TRUE(ps.Push(again, Grad(1, 1))->duplicate());
  EXPECT_EQ(*PullRow(&ps, "emb", 3), (std::vector<float>{-1, -2}));  // lr 1, applied once
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-1, -1}));
  EXPECT_EQ(ps.Status().global_step(), 1);
}

// Job "w", "v" (dense) and "emb" (a table) under ASYNC at generation 1.
CreateVariablesRequest CreateTwoDense() {
  CreateVariablesRequest req = CreateAt("ASYNC", 1, 1);
  VariableDef* v = req.add_variable();
  *v = req.variable(0);
  v->set_name("v");
  return req;
}

NamedTensors GradOf(const std::string& name, float a, float b) {
  return {{name, Tensor::FromVector<float>({a, b}, TensorShape({2}))}};
}

// Part `bucket` of a step of batch 5 of stream 0, from incarnation `inc`.
RequestId BatchPart(uint64_t inc, int bucket, bool last) {
  RequestId id = WithData(PartId(0, inc, 0, bucket, last), 0, 5);
  id.set_generation(1);
  return id;
}

// A worker killed between the buckets of its step leaves part of its batch
// applied: the PS says so (no checkpoint is taken while it does), and a new
// incarnation pushing the batch again, cut into other buckets, applies only
// the variables and rows no push of it applied; the step counts once.
TEST(ServerCoreTest, AsyncTakesABatchCutByADeathBetweenBucketsOnce) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateTwoDense()).ok());
  ASSERT_FALSE(ps.Push(BatchPart(1, 1, false), GradOf("w", 1, 1))->duplicate());
  // Incarnation 1 dies here, its part of batch 5 applied.
  PsStatusResponse st = ps.Status();
  EXPECT_TRUE(st.stream_next_batch().empty());
  ASSERT_EQ(st.stream_part_batch().size(), 1u);
  EXPECT_EQ(st.stream_part_batch().at(0), 5);
  EXPECT_EQ(st.global_step(), 0);
  // Incarnation 2 pushes "v" first, then "w" with the rows as its last part.
  ASSERT_FALSE(ps.Push(BatchPart(2, 1, false), GradOf("v", 1, 1))->duplicate());
  Tensor ids = Tensor::FromVector<int64_t>({3}, TensorShape({1}));
  std::vector<SparseUpdate> rows = {{"emb", ids, Tensor::FromVector<float>({1, 2}, TensorShape({1, 2}))}};
  ASSERT_FALSE(ps.PushRows(BatchPart(2, 2, true), rows)->duplicate());
  ASSERT_FALSE(ps.Push(BatchPart(2, 2, true), GradOf("w", 1, 1))->duplicate());
  st = ps.Status();
  EXPECT_EQ(st.stream_next_batch().at(0), 6);
  EXPECT_TRUE(st.stream_part_batch().empty());
  EXPECT_EQ(st.global_step(), 1);
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-1, -1}));  // once, not twice
  EXPECT_EQ(*PullRow(&ps, "emb", 3), (std::vector<float>{-1, -2}));
  // A third incarnation's whole push of the batch is a duplicate.
  RequestId whole = BatchPart(3, 0, false);
  EXPECT_TRUE(ps.PushRows(whole, rows)->duplicate());
  EXPECT_TRUE(ps.Push(whole, GradOf("v", 1, 1))->duplicate());
  EXPECT_EQ(*PullRow(&ps, "emb", 3), (std::vector<float>{-1, -2}));
  EXPECT_EQ(ps.Status().global_step(), 1);
}

// The dead incarnation's parts may hold rows (its last part, taken up to
// the dense gradients); the next pushes the batch whole, unbucketed: only
// what is missing is applied. A restore forgets a batch in progress.
TEST(ServerCoreTest, AsyncTakesTheRestOfABatchFromAWholePush) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateTwoDense()).ok());
  Tensor ids = Tensor::FromVector<int64_t>({3}, TensorShape({1}));
  std::vector<SparseUpdate> rows = {{"emb", ids, Tensor::FromVector<float>({1, 2}, TensorShape({1, 2}))}};
  ASSERT_FALSE(ps.Push(BatchPart(1, 1, false), GradOf("v", 1, 1))->duplicate());
  ASSERT_FALSE(ps.PushRows(BatchPart(1, 2, true), rows)->duplicate());
  // Dies before its last part's dense gradients are taken.
  EXPECT_EQ(ps.Status().stream_part_batch().at(0), 5);
  RequestId whole = BatchPart(2, 0, false);
  ASSERT_FALSE(ps.PushRows(whole, rows)->duplicate());
  NamedTensors both = GradOf("w", 1, 1);
  both.push_back(GradOf("v", 1, 1)[0]);
  ASSERT_FALSE(ps.Push(whole, both)->duplicate());
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-1, -1}));
  EXPECT_EQ(*PullRow(&ps, "emb", 3), (std::vector<float>{-1, -2}));
  EXPECT_EQ(*PullW(&ps, 0, 0, absl::Seconds(10), "v"), (std::vector<float>{-1, -1}));
  EXPECT_EQ(ps.Status().stream_next_batch().at(0), 6);
  EXPECT_TRUE(ps.Status().stream_part_batch().empty());
  // A fresh start forgets a batch in progress as it forgets whole ones.
  RequestId next = WithData(PartId(0, 2, 1, 1, false), 0, 6);
  next.set_generation(1);
  ASSERT_FALSE(ps.Push(next, GradOf("w", 1, 1))->duplicate());
  EXPECT_EQ(ps.Status().stream_part_batch().at(0), 6);
  CreateVariablesRequest fresh = CreateTwoDense();
  fresh.set_reinitialize(true);
  ASSERT_TRUE(ps.CreateVariables(fresh).ok());
  EXPECT_TRUE(ps.Status().stream_part_batch().empty());
}

// A replica's reads see whole steps: under SGD with rate 1 and a gradient
// of 1 per element, a Pull at global step g must hold exactly -g in every
// element of every variable, however it interleaves with the pushes (a
// large variable makes each apply long enough to land reads inside it).
TEST(ServerCoreTest, WholeStepReadsMatchTheStepTheyReport) {
  ServerCoreOptions o = Options();
  o.reads_see_whole_steps = true;
  o.apply_threads = 2;
  ParameterServerCore ps(o);
  CreateVariablesRequest req;
  const int64_t n = 1 << 18;
  for (const char* name : {"a", "b"}) {
    VariableDef* v = req.add_variable();
    v->set_name(name);
    v->set_dtype(DT_FLOAT);
    v->mutable_shape()->add_dim(n);
    v->mutable_initializer()->set_kind(InitializerDef::ZEROS);
  }
  req.mutable_optimizer()->mutable_sgd()->set_learning_rate(1);
  req.set_num_workers(1);
  ASSERT_TRUE(ps.CreateVariables(req).ok());
  const Tensor ones = Tensor::FromVector<float>(std::vector<float>(n, 1.0f), TensorShape({n}));
  constexpr int kPushes = 200;
  std::thread pusher([&] {
    for (int step = 0; step < kPushes; ++step) ASSERT_TRUE(ps.Push(Id(0, step), {{"a", ones}, {"b", ones}}).ok());
  });
  int reads = 0, torn = 0;
  for (int64_t last = 0; last < kPushes;) {
    absl::Notification done;
    ps.Pull({"a", "b"}, -1, 0, absl::InfiniteFuture(), [&](absl::Status s, NamedTensors t, int64_t gs) {
      ASSERT_TRUE(s.ok()) << s;
      for (const auto& [name, value] : t) {
        const float* d = value.data<float>();
        for (int64_t i = 0; i < n; i += 4099) torn += d[i] != -static_cast<float>(gs);
        torn += d[n - 1] != -static_cast<float>(gs);
      }
      last = gs;
      done.Notify();
    });
    done.WaitForNotification();
    ++reads;
  }
  pusher.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
}

TEST(ServerCoreTest, ARetriedPushRowsAppliesOnce) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  Tensor ids = Tensor::FromVector<int64_t>({3}, TensorShape({1}));
  std::vector<SparseUpdate> rows = {{"emb", ids, Tensor::FromVector<float>({1, 2}, TensorShape({1, 2}))}};
  EXPECT_FALSE(ps.PushRows(Id(0, 0), rows)->duplicate());
  EXPECT_TRUE(ps.PushRows(Id(0, 0), rows)->duplicate());
  absl::Notification done;
  ps.PullRows({{"emb", ids}}, 0, 0, absl::InfiniteFuture(), [&](absl::Status s, NamedTensors t, int64_t) {
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(t[0].second.data<float>()[1], -2.0f);  // lr 1, applied once
    done.Notify();
  });
  done.WaitForNotification();
}

TEST(ServerCoreTest, BadPushesChangeNothing) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  NamedTensors mixed = Grad(1, 1);
  mixed.emplace_back("nope", Tensor::Zeros(DT_FLOAT, TensorShape({2})));
  EXPECT_EQ(ps.Push(Id(0, 0), mixed).status().code(), absl::StatusCode::kNotFound);
  auto bad = ps.Push(Id(0, 1), {{"w", Tensor::Zeros(DT_FLOAT, TensorShape({3}))}});
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("variable w: gradient is float32[3]"));
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{0, 0}));
  auto rows = ps.PushRows(Id(0, 2), {{"w", Tensor::FromVector<int64_t>({1}, TensorShape({1})),
                                      Tensor::Zeros(DT_FLOAT, TensorShape({1, 2}))}});
  EXPECT_THAT(std::string(rows.status().message()), HasSubstr("is dense"));
  // Recreating with another shape is refused; the same definition is fine.
  CreateVariablesRequest other = Create("ASYNC", 1);
  other.mutable_variable(0)->mutable_shape()->set_dim(0, 3);
  EXPECT_EQ(ps.CreateVariables(other).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
}

// Issue #17: a pull's answer is bounded by --max_pull_response_mb, checked
// before any row is read or made.
TEST(ServerCoreTest, PullAnswersOverTheBoundAreRefusedBeforeAnyCopy) {
  ServerCoreOptions o = Options();
  o.max_pull_response_bytes = 16;  // "w" is 8 bytes, a row of "emb" 8
  ParameterServerCore ps(o);
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  EXPECT_TRUE(PullW(&ps, 0, 0).ok());
  auto pull_rows = [&](std::vector<int64_t> v) {
    absl::Status status;
    absl::Notification done;
    Tensor ids = Tensor::FromVector<int64_t>(v, TensorShape({static_cast<int64_t>(v.size())}));
    ps.PullRows({{"emb", ids}}, 0, 0, absl::InfiniteFuture(), [&](absl::Status s, NamedTensors, int64_t) {
      status = s;
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  };
  EXPECT_TRUE(pull_rows({1, 2}).ok());  // 16 bytes: at the bound
  EXPECT_EQ(ps.Status().rows(), 2);
  absl::Status over = pull_rows({3, 4, 5});
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(over.message()), HasSubstr("--max_pull_response_mb"));
  EXPECT_THAT(std::string(over.message()), HasSubstr("24 bytes"));
  EXPECT_EQ(ps.Status().rows(), 2);  // no row made for the refused pull
  o.max_pull_response_bytes = 4;
  ParameterServerCore small(o);
  ASSERT_TRUE(small.CreateVariables(Create("ASYNC", 1)).ok());
  absl::Notification done;
  small.Pull({"w"}, 0, 0, absl::InfiniteFuture(), [&](absl::Status s, NamedTensors t, int64_t) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(s.message()), HasSubstr("Pull refused: its answer would be 8 bytes"));
    EXPECT_TRUE(t.empty());
    done.Notify();
  });
  done.WaitForNotification();
}

// Found by tests/fuzz/ps_request_fuzzer: worker 2^31-1 sized a vector of
// 2^31 steps (16 GiB), and step INT64_MAX overflowed computing the next.
TEST(ServerCoreTest, WorkerIdsAndStepsFromTheWireAllocateNothing) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("BOUNDED_STALENESS", 2, 1)).ok());
  for (int worker : {2, 1 << 30, std::numeric_limits<int32_t>::max()}) {
    EXPECT_TRUE(ps.Push(Id(worker, std::numeric_limits<int64_t>::max()), Grad(1, 1)).ok()) << worker;
  }
  EXPECT_TRUE(ps.Push(Id(0, std::numeric_limits<int64_t>::max()), Grad(1, 1)).ok());
  // Worker 1 has pushed nothing: worker 0 may not run 2 steps ahead of it.
  EXPECT_EQ(PullW(&ps, 0, 2, absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Found by tests/fuzz/ps_request_fuzzer (libFuzzer run): num_workers
// 2^31-4 sized per-worker state at 16 GiB.
TEST(ServerCoreTest, RefusesAnAbsurdNumberOfWorkers) {
  ParameterServerCore ps(Options());
  auto created = ps.CreateVariables(Create("ASYNC", std::numeric_limits<int32_t>::max() - 3));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("num_workers"));
  EXPECT_TRUE(ps.CreateVariables(Create("ASYNC", 1 << 16)).ok());
}

// Found by tests/fuzz/ps_request_fuzzer: float32 [2^62, 1] is 2^64 bytes,
// which wrapped to an empty buffer the initializer then wrote past.
TEST(ServerCoreTest, RefusesAVariableWhoseSizeOverflows) {
  ParameterServerCore ps(Options());
  CreateVariablesRequest req = Create("ASYNC", 1);
  req.mutable_variable(0)->mutable_shape()->set_dim(0, int64_t{1} << 62);
  req.mutable_variable(0)->mutable_shape()->add_dim(1);
  req.mutable_variable(1)->mutable_shape()->set_dim(1, int64_t{1} << 60);
  auto created = ps.CreateVariables(req);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("is too large"));
  req.mutable_variable()->DeleteSubrange(0, 1);  // the hash table alone
  EXPECT_THAT(std::string(ps.CreateVariables(req).status().message()), HasSubstr("is too large"));
}

TEST(ServerCoreTest, SyncAppliesTheMeanOnceEveryWorkerPushedAndHoldsPulls) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("SYNC", 2)).ok());
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{0, 0}));
  ASSERT_TRUE(ps.Push(Id(0, 0), Grad(2, 4)).ok());
  // Worker 0's pull for step 1 waits for worker 1's gradient of step 0.
  absl::StatusOr<std::vector<float>> got;
  std::thread puller([&] { got = PullW(&ps, 0, 1); });
  EXPECT_EQ(ps.Push(Id(0, 1), Grad(1, 1)).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(ps.Push(Id(1, 0), Grad(4, 8)).ok());
  puller.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<float>{-3, -6}));  // mean of the two, lr 1
  EXPECT_TRUE(ps.Push(Id(1, 0), Grad(4, 8))->duplicate());
  EXPECT_EQ(*PullW(&ps, 1, 1), (std::vector<float>{-3, -6}));
}

// A SYNC group resized under a new generation (a worker joins): the step
// half gathered is dropped, a pull waiting for it is answered ABORTED, and
// the step pushed again by every member of the new group counts once.
TEST(ServerCoreTest, ANewGenerationRestartsTheHalfGatheredSyncStep) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("SYNC", 2, 1)).ok());
  ASSERT_TRUE(ps.Push(IdAt(0, 0, 1), Grad(100, 100)).ok());  // worker 0 of 2: waits
  // Pull returns once the pull is queued (step 1 is not ready yet).
  absl::Notification answered;
  absl::Status waiting;
  ps.Pull({"w"}, 0, 1, absl::Now() + absl::Seconds(30), [&](absl::Status s, NamedTensors, int64_t) {
    waiting = s;
    answered.Notify();
  });
  EXPECT_FALSE(answered.HasBeenNotified());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("SYNC", 3, 2)).ok());
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(waiting.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(waiting.message()), HasSubstr("moved to generation 2"));
  for (int w = 0; w < 3; ++w) {
    auto r = ps.Push(IdAt(w, 0, 2), Grad(3, 6));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->duplicate()) << "worker " << w;
  }
  // The mean of the new group's three, not worker 0's old gradient.
  EXPECT_EQ(*PullW(&ps, 0, 1), (std::vector<float>{-3, -6}));
}

TEST(ServerCoreTest, BoundedStalenessBlocksTheFastWorkerWithADeadline) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("BOUNDED_STALENESS", 2, 1)).ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), Grad(0, 0)).ok());
  ASSERT_TRUE(PullW(&ps, 0, 1).ok());  // 1 ahead of worker 1 (at 0): allowed
  auto late = PullW(&ps, 0, 2, absl::Milliseconds(50));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<std::vector<float>> got;
  std::thread puller([&] { got = PullW(&ps, 0, 2); });
  ASSERT_TRUE(ps.Push(Id(1, 0), Grad(0, 0)).ok());  // worker 1 reaches step 1
  puller.join();
  EXPECT_TRUE(got.ok()) << got.status();
}

// After worker 1 left a job of workers {0, 1, 2}, the group is {0, 2}:
// worker 1's old step must not hold the others back, and worker 2 (an
// index past num_workers) must.
TEST(ServerCoreTest, BoundedStalenessWaitsForTheActiveWorkersOnly) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("BOUNDED_STALENESS", 3, 1)).ok());  // staleness 0
  ASSERT_TRUE(ps.Push(IdAt(0, 0, 1), Grad(0, 0)).ok());
  ASSERT_TRUE(ps.Push(IdAt(2, 0, 1), Grad(0, 0)).ok());  // worker 1 never pushes again
  CreateVariablesRequest left = CreateAt("BOUNDED_STALENESS", 2, 2);
  left.add_active_workers(0);
  left.add_active_workers(2);
  left.add_active_worker_steps(5);
  left.add_active_worker_steps(3);
  ASSERT_TRUE(ps.CreateVariables(left).ok());
  // Worker 2 starts at step 3: worker 0 may pull step 3, not step 4.
  EXPECT_TRUE(PullW(&ps, 0, 3, absl::Milliseconds(50)).ok());
  EXPECT_EQ(PullW(&ps, 0, 4, absl::Milliseconds(50)).status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<std::vector<float>> got;
  std::thread puller([&] { got = PullW(&ps, 0, 4); });
  ASSERT_TRUE(ps.Push(IdAt(2, 3, 2), Grad(0, 0)).ok());  // worker 2 reaches step 4
  puller.join();
  EXPECT_TRUE(got.ok()) << got.status();
}

TEST(ServerCoreTest, MalformedActiveWorkersChangeNothing) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("BOUNDED_STALENESS", 2, 1)).ok());
  struct Case {
    std::vector<int> workers;
    std::vector<int64_t> steps;
    int num_workers;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{0}, {}, 2, "lists 1 workers but num_workers is 2"},
      {{0, 0}, {}, 2, "worker 0 twice"},
      {{0, -1}, {}, 2, "active_workers[1] = -1"},
      {{0, 1 << 16}, {}, 2, "is not a worker index"},
      {{0, 1}, {1}, 2, "has 1 steps for 2"},
      {{0, 1}, {1, -4}, 2, "active_worker_steps[1] = -4"},
      {{}, {1}, 2, "without active_workers"},
  };
  for (const Case& c : cases) {
    CreateVariablesRequest req = CreateAt("BOUNDED_STALENESS", c.num_workers, 2);
    for (int w : c.workers) req.add_active_workers(w);
    for (int64_t st : c.steps) req.add_active_worker_steps(st);
    auto r = ps.CreateVariables(req);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.says));
  }
  // Nothing moved: generation 1's pushes are still the ones accepted.
  EXPECT_TRUE(ps.Push(IdAt(0, 0, 1), Grad(1, 1)).ok());
}

// A backup rebuilt from its serving copy's snapshot (chief/rebuild.cc)
// takes that copy's record of data streams with it
// (RestoreRequest.stream_next_batch): promoted later, it still answers a
// batch applied before the rebuild as a duplicate. A checkpoint's restore
// names none, and forgets the record.
TEST(ServerCoreTest, ARebuiltCopyTakesItsSourcesRecordOfStreams) {
  const std::string dir = "core_rebuild";
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("ASYNC", 1, 1)).ok());
  ASSERT_FALSE(ps.Push(WithData(IdAt(0, 0, 1), 3, 7), Grad(1, 1))->duplicate());
  SnapshotRequest snap;
  snap.set_step(1);
  snap.set_checkpoint(dir);
  snap.set_wait_durable(true);
  ASSERT_TRUE(ps.Snapshot(snap).ok());
  RestoreRequest rebuild;
  rebuild.set_step(1);
  rebuild.set_checkpoint(dir);
  rebuild.set_generation(1);
  *rebuild.mutable_stream_next_batch() = ps.Status().stream_next_batch();
  RestoreRequest bad = rebuild;
  (*bad.mutable_stream_next_batch())[1 << 16] = 1;
  EXPECT_EQ(ps.Restore(bad).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ps.Restore(rebuild).ok());
  EXPECT_EQ(ps.Status().stream_next_batch().at(3), 8);
  RequestId again = WithData(IdAt(0, 0, 1), 3, 7);
  again.set_worker_incarnation(2);
  EXPECT_TRUE(ps.Push(again, Grad(1, 1))->duplicate());
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-1, -1}));
  RestoreRequest checkpoint = rebuild;
  checkpoint.clear_stream_next_batch();
  ASSERT_TRUE(ps.Restore(checkpoint).ok());
  EXPECT_TRUE(ps.Status().stream_next_batch().empty());
}

TEST(ServerCoreTest, SnapshotAndRestoreAreAllOrNothing) {
  const std::string dir = "core_snap";
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), Grad(1, 1)).ok());
  Tensor ids = Tensor::FromVector<int64_t>({7}, TensorShape({1}));
  ASSERT_TRUE(ps.PushRows(Id(0, 0), {{"emb", ids, Tensor::FromVector<float>({1, 2}, TensorShape({1, 2}))}}).ok());
  SnapshotRequest snap;
  snap.set_step(1);
  snap.set_checkpoint(dir);
  snap.set_wait_durable(true);
  auto r = ps.Snapshot(snap);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->durable());
  EXPECT_THAT(ps.Status().durable_snapshots(), testing::ElementsAre(1));

  ASSERT_TRUE(ps.Push(Id(0, 1), Grad(5, 5)).ok());
  RestoreRequest missing;
  missing.set_step(99);
  missing.set_checkpoint(dir);
  EXPECT_EQ(ps.Restore(missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-6, -6}));  // untouched

  RestoreRequest back;
  back.set_step(1);
  back.set_checkpoint(dir);
  ASSERT_TRUE(ps.Restore(back).ok());
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-1, -1}));
  EXPECT_EQ(ps.Status().global_step(), 1);
  absl::Notification done;
  ps.PullRows({{"emb", ids}}, 0, 0, absl::InfiniteFuture(), [&](absl::Status s, NamedTensors t, int64_t) {
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(t[0].second.data<float>()[1], -2.0f);
    done.Notify();
  });
  done.WaitForNotification();
  // The same step is pushed again after a restore, and applies.
  EXPECT_FALSE(ps.Push(Id(0, 1), Grad(1, 1))->duplicate());
}

// After a recovery the chief checkpoints the same steps again, so a step
// may be snapshotted while an older copy of it is on disk. It is durable
// only once its new copy is written, even when another write completes
// first (else the chief could commit the stale copy).
TEST(ServerCoreTest, AStepSnapshottedAgainIsDurableOnlyOnceItsNewCopyIs) {
  const std::string dir = "core_again";
  absl::Mutex mu;
  int entered = 0;  // writes that reached their first chunk
  int allowed = 1;  // writes let past it
  ServerCoreOptions o = Options();
  o.snapshot.fault_pause_after_chunks = 1;
  o.snapshot.on_fault_pause = [&] {
    absl::MutexLock lock(&mu);
    ++entered;
    auto go = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return entered <= allowed; };
    mu.Await(absl::Condition(&go));
  };
  ParameterServerCore ps(o);
  // Declared after ps: on any early return the writer is let go before
  // ps's destructor joins it.
  struct Release {
    absl::Mutex* mu;
    int* allowed;
    ~Release() {
      absl::MutexLock lock(mu);
      *allowed = 1 << 20;
    }
  } release{&mu, &allowed};
  auto let_write = [&](int n, int until_entered) {
    absl::MutexLock lock(&mu);
    allowed = n;
    auto there = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return entered >= until_entered; };
    mu.Await(absl::Condition(&there));
  };
  auto snapshot = [&](int64_t step, bool wait) {
    SnapshotRequest req;
    req.set_step(step);
    req.set_checkpoint(dir);
    req.set_wait_durable(wait);
    return ps.Snapshot(req);
  };
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), Grad(1, 1)).ok());
  ASSERT_TRUE(snapshot(2, true).ok());  // the old copy of step 2: w = -1
  ASSERT_TRUE(ps.Push(Id(0, 1), Grad(1, 1)).ok());
  ASSERT_TRUE(snapshot(1, false).ok());
  let_write(1, 2);  // step 1's write holds at its first chunk
  ASSERT_TRUE(snapshot(2, false).ok());  // queued behind it: w = -2
  EXPECT_THAT(ps.Status().durable_snapshots(), testing::ElementsAre());
  let_write(2, 3);  // step 1 done; step 2's new copy holds at its first chunk
  EXPECT_THAT(ps.Status().durable_snapshots(), testing::ElementsAre(1));
  let_write(3, 3);
  RestoreRequest back;  // waits for the writer
  back.set_step(2);
  back.set_checkpoint(dir);
  ASSERT_TRUE(ps.Restore(back).ok());
  EXPECT_THAT(ps.Status().durable_snapshots(), testing::ElementsAre(1, 2));
  EXPECT_EQ(*PullW(&ps, 0, 0), (std::vector<float>{-2, -2}));
}

TEST(ServerCoreTest, ARestartedServerSaysItLostItsVariables) {
  ParameterServerCore ps(Options());
  auto r = PullW(&ps, 0, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("holds no variables"));
}

TEST(ServerCoreTest, PushesAndPullsOfAnotherGenerationAreRefused) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(CreateAt("ASYNC", 1, 7)).ok());
  auto refused = ps.Push(IdAt(0, 0, 6), Grad(1, 1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("push of generation 6 refused"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("is at generation 7"));
  EXPECT_EQ(ps.CheckGeneration(6, "pull").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ps.CheckGeneration(7, "pull").ok());
  ASSERT_TRUE(ps.Push(IdAt(0, 0, 7), Grad(1, 1)).ok());
  EXPECT_EQ(ps.Status().global_step(), 1);  // the refused push changed nothing
  EXPECT_EQ(ps.Status().generation(), 7);
  EXPECT_EQ(ps.Status().stale_generation_refused(), 2);
}

TEST(ServerCoreTest, ARestoreMovesToItsGenerationWithTheValues) {
  const std::string dir = "generation";
  ParameterServerCore ps(Options());
  CreateVariablesRequest create = Create("ASYNC", 1);
  create.set_generation(1);
  ASSERT_TRUE(ps.CreateVariables(create).ok());
  SnapshotRequest snap;
  snap.set_step(0);
  snap.set_checkpoint(dir);
  snap.set_wait_durable(true);
  ASSERT_TRUE(ps.Snapshot(snap).ok());
  RequestId old = Id(0, 0);
  old.set_generation(1);
  ASSERT_TRUE(ps.Push(old, Grad(1, 1)).ok());
  RestoreRequest back;
  back.set_step(0);
  back.set_checkpoint(dir);
  back.set_generation(2);
  ASSERT_TRUE(ps.Restore(back).ok());
  old.set_step(1);
  EXPECT_EQ(ps.Push(old, Grad(1, 1)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ps.Status().global_step(), 0);  // the snapshot's, and nothing since
}

TEST(ServerCoreTest, ReinitializeStartsEveryVariableAfresh) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  auto initial = PullW(&ps, 0, 0);
  ASSERT_TRUE(initial.ok());
  ASSERT_TRUE(ps.Push(Id(0, 0), Grad(1, 1)).ok());
  EXPECT_NE(*PullW(&ps, 0, 0), *initial);
  CreateVariablesRequest again = Create("ASYNC", 1);
  again.set_reinitialize(true);
  ASSERT_TRUE(ps.CreateVariables(again).ok());
  EXPECT_EQ(*PullW(&ps, 0, 0), *initial);
  EXPECT_EQ(ps.Status().global_step(), 0);
  EXPECT_FALSE(ps.Push(Id(0, 0), Grad(1, 1))->duplicate());  // nothing seen any more
}

TEST(ServerCoreTest, APullNamingAVariableTwiceIsRefused) {
  ParameterServerCore ps(Options());
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  absl::Status status;
  ps.Pull({"w", "w"}, 0, 0, absl::InfiniteFuture(), [&](absl::Status s, NamedTensors, int64_t) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("names variable w more than once"));
}

TEST(ServerCoreTest, WithAMemoryLimitHashTablesAreBoundedByDefault) {
  ServerCoreOptions o = Options();
  o.max_memory_bytes = 1 << 20;
  ParameterServerCore ps(o);
  CreateVariablesRequest req;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    variable { name: "emb" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 64 } initializer { kind: ZEROS } }
    optimizer { sgd { learning_rate: 0.1 } }
    consistency { mode: ASYNC }
    num_workers: 1
  )pb", &req));
  ASSERT_TRUE(ps.CreateVariables(req).ok());
  // 1 MiB holds 4096 rows of 64 floats: a flood of new ids stops there.
  Tensor ids(DT_INT64, TensorShape({8192}));
  for (int64_t i = 0; i < 8192; ++i) ids.data<int64_t>()[i] = i * 7919;
  absl::Status status;
  ps.PullRows({{"emb", ids}}, 0, 0, absl::InfiniteFuture(),
              [&](absl::Status s, NamedTensors, int64_t) { status = s; });
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
}

// Issue #17: requests name a checkpoint, never a path; the PS derives the
// directory under its own --snapshot_dir.
TEST(ServerCoreTest, RequestsNameACheckpointNeverAPath) {
  EXPECT_TRUE(CheckCheckpointName("ckpt").ok());
  EXPECT_TRUE(CheckCheckpointName("job-1.v2_final").ok());
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "a/b", "/etc", "../etc", "a b", "a\nb", "caf\xc3\xa9",
                          std::string(256, 'a'), std::string("a\0b", 3)}) {
    absl::Status s = CheckCheckpointName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("checkpoint: ")) << bad;
  }
  ServerCoreOptions o = Options();
  o.snapshot_root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/named");
  ParameterServerCore ps(o);
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  SnapshotRequest snap;
  snap.set_step(1);
  snap.set_checkpoint("job1");
  snap.set_wait_durable(true);
  auto r = ps.Snapshot(snap);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->path(), "ps-0");  // relative to the checkpoint, as manifests name shards
  EXPECT_TRUE(std::filesystem::is_directory(o.snapshot_root + "/job1/ps-0"));
  snap.set_checkpoint("../escape");
  EXPECT_EQ(ps.Snapshot(snap).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(std::getenv("TEST_TMPDIR"), "/escape")));
  snap.set_checkpoint("job1");
  snap.set_keep(101);  // each kept snapshot is a copy on disk
  auto keep = ps.Snapshot(snap);
  EXPECT_EQ(keep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(keep.status().message()), HasSubstr("keep"));
  snap.set_keep(0);
  RestoreRequest back;
  back.set_step(1);
  back.set_checkpoint("/etc");
  EXPECT_EQ(ps.Restore(back).status().code(), absl::StatusCode::kInvalidArgument);
  back.set_checkpoint("job1");
  EXPECT_TRUE(ps.Restore(back).ok());
  // A PS without a snapshot directory refuses instead of guessing one.
  ServerCoreOptions none = Options();
  none.snapshot_root.clear();
  ParameterServerCore bare(none);
  ASSERT_TRUE(bare.CreateVariables(Create("ASYNC", 1)).ok());
  EXPECT_EQ(bare.Snapshot(snap).status().code(), absl::StatusCode::kFailedPrecondition);
}

int OpenFds() {
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd"); it != std::filesystem::directory_iterator(); ++it) ++n;
  return n;
}

// Snapshots not waiting for durability are copies in memory queued for the
// writer: at most a few, then RESOURCE_EXHAUSTED (found by
// tests/control_soak_test: the queue grew with every request).
TEST(ServerCoreTest, SnapshotsWaitingForTheWriterAreBounded) {
  absl::Mutex mu;
  bool go = false;
  int stalled = 0;
  ServerCoreOptions o = Options();
  o.snapshot.fault_pause_after_chunks = 1;
  o.snapshot.on_fault_pause = [&] {
    absl::MutexLock lock(&mu);
    ++stalled;
    mu.Await(absl::Condition(&go));
  };
  ParameterServerCore ps(o);
  struct Release {  // after ps: the writer is let go before ps joins it
    absl::Mutex* mu;
    bool* go;
    ~Release() {
      absl::MutexLock lock(mu);
      *go = true;
    }
  } release{&mu, &go};
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  auto snapshot = [&](int64_t step) {
    SnapshotRequest req;
    req.set_step(step);
    req.set_checkpoint("queue");
    return ps.Snapshot(req).status();
  };
  ASSERT_TRUE(snapshot(1).ok());
  {
    absl::MutexLock lock(&mu);  // the writer holds step 1 at its first chunk
    auto in = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stalled == 1; };
    mu.Await(absl::Condition(&in));
  }
  for (int64_t step = 2; step <= 5; ++step) ASSERT_TRUE(snapshot(step).ok()) << step;
  absl::Status refused = snapshot(6);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("waiting to be written"));
}

// Requests naming ever new directories used to leave a RocksDB open for
// each (descriptors 9 -> 429 after 60, issue #17).
TEST(ServerCoreTest, StoresOpenedForRequestsAreClosedBeyondAFew) {
  const std::string root = absl::StrCat(std::getenv("TEST_TMPDIR"), "/many");
  ServerCoreOptions o = Options();
  o.snapshot_root = root;
  ParameterServerCore ps(o);
  ASSERT_TRUE(ps.CreateVariables(Create("ASYNC", 1)).ok());
  auto snapshot = [&](int i) {
    SnapshotRequest req;
    req.set_step(i);
    req.set_checkpoint(absl::StrCat("dir", i));
    req.set_wait_durable(true);
    return ps.Snapshot(req).status();
  };
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(snapshot(i).ok());
  const int fds = OpenFds();
  for (int i = 6; i < 40; ++i) ASSERT_TRUE(snapshot(i).ok()) << i;
  EXPECT_LE(OpenFds(), fds + 8);
  SnapshotRequest outside;
  outside.set_step(1);
  outside.set_checkpoint("/tmp/elsewhere");
  EXPECT_EQ(ps.Snapshot(outside).status().code(), absl::StatusCode::kInvalidArgument);
  RestoreRequest escape;
  escape.set_checkpoint("../../etc");
  EXPECT_EQ(ps.Restore(escape).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psrt
