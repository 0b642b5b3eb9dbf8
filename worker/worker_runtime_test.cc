// The worker's loop against an in-memory parameter store and a quadratic
// "model", with failures injected where a real PS would fail.
#include "worker/worker_runtime.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

// w -= 0.1 * grad on every push; records the step of each push.
class FakePs : public ParameterClient {
 public:
  absl::StatusOr<TensorMap> Pull(const std::vector<std::string>&, int64_t step) override {
    absl::Notification* gate = nullptr;
    {
      absl::MutexLock l(&mu);
      if (fail_pull_at == step) {
        fail_pull_at = -1;
        return absl::UnavailableError("ps:0 is gone");
      }
      if (block_pull_at == step) {
        block_pull_at = -1;
        gate = &release;
        pulled_blocked.Notify();
      }
    }
    if (gate) gate->WaitForNotification();
    absl::MutexLock l(&mu);
    pulled.push_back(step);
    return TensorMap{{"w", Tensor::FromVector<float>({w}, TensorShape({1}))}};
  }
  absl::StatusOr<TensorMap> PullRows(const RowRequest&, int64_t) override { return TensorMap{}; }
  absl::Status Push(const RequestId& id, const TensorMap& dense,
                    const std::map<std::string, std::pair<Tensor, Tensor>>&) override {
    absl::Notification* gate = nullptr;
    {
      absl::MutexLock l(&mu);
      if (fail_push_at == id.step()) {
        fail_push_at = -1;
        return absl::Status(fail_push_code, "push refused");
      }
      if (block_push_at == id.step()) {
        block_push_at = -1;
        gate = &push_release;
      }
    }
    if (gate) gate->WaitForNotification();
    absl::MutexLock l(&mu);
    w -= 0.1f * dense.at("w").data<float>()[0];
    pushed.push_back(id.step());
    return absl::OkStatus();
  }

  // Bucketed pushes (FakeParts): a part is applied when it arrives, the
  // step counts (pushed) at Finish. events: "part S", "backward S",
  // "finish S" in the order they happened.
  void AddPart(const RequestId& id, const Tensor& g) {
    absl::MutexLock l(&mu);
    w -= 0.1f * g.data<float>()[0];
    events.push_back(absl::StrCat("part ", id.step()));
  }
  absl::Status FinishParts(const RequestId& id) {
    absl::MutexLock l(&mu);
    if (fail_push_at == id.step()) {
      fail_push_at = -1;
      return absl::Status(fail_push_code, "push refused");
    }
    events.push_back(absl::StrCat("finish ", id.step()));
    pushed.push_back(id.step());
    return absl::OkStatus();
  }

  absl::Mutex mu;
  float w = 0;
  std::vector<int64_t> pushed;
  bool buckets = false;  // the client makes BucketedPushes
  std::vector<std::string> events;
  // The runner holds step hold_at's backward on `backward_release`, after
  // its first gradient was handed over (hold_before_part: before).
  int64_t hold_at = -1;
  bool hold_before_part = false;
  absl::Notification backward_held, backward_release;
  int64_t fail_pull_at = -1;
  int64_t block_pull_at = -1;
  absl::Notification pulled_blocked, release;
  std::vector<int64_t> pulled;  // steps of the pulls answered
  int64_t fail_push_at = -1;    // that push fails once, changing nothing
  absl::StatusCode fail_push_code = absl::StatusCode::kUnavailable;
  int64_t block_push_at = -1;   // that push waits for push_release
  absl::Notification push_release;
};

struct FakeParts : BucketedPush {
  FakeParts(FakePs* p, const RequestId& i) : ps(p), id(i) {}
  void Add(const std::string&, const Tensor& g) override { ps->AddPart(id, g); }
  absl::Status Finish(const std::map<std::string, std::pair<Tensor, Tensor>>&) override {
    return ps->FinishParts(id);
  }
  FakePs* ps;
  RequestId id;
};

// loss = (w - 3)^2 per batch.
class QuadraticRunner : public StepRunner {
 public:
  std::vector<std::string> DenseVariables() const override { return {"w"}; }
  absl::StatusOr<RowRequest> SparseRows(const Batch&) const override { return RowRequest{}; }
  absl::StatusOr<StepResult> Run(const TensorMap& dense, const TensorMap&, const Batch&, int64_t) override {
    float w = dense.at("w").data<float>()[0];
    StepResult r;
    r.loss = (w - 3) * (w - 3);
    r.dense_gradients["w"] = Tensor::FromVector<float>({2 * (w - 3)}, TensorShape({1}));
    return r;
  }
  std::string device() const override { return "cpu"; }
};

// The same, handing w's gradient over before its "backward" ends.
class StreamingRunner : public QuadraticRunner {
 public:
  explicit StreamingRunner(FakePs* ps) : ps_(ps) {}
  absl::StatusOr<StepResult> RunStreaming(const TensorMap& dense, const TensorMap& rows, const Batch& b,
                                          int64_t step, const GradientReady& ready) override {
    absl::StatusOr<StepResult> r = Run(dense, rows, b, step);
    bool hold, before;
    {
      absl::MutexLock l(&ps_->mu);
      hold = ps_->hold_at == step;
      before = ps_->hold_before_part;
    }
    if (hold && before) Hold();
    ready("w", r->dense_gradients.at("w"));
    if (hold && !before) Hold();
    r->dense_gradients.clear();
    absl::MutexLock l(&ps_->mu);
    ps_->events.push_back(absl::StrCat("backward ", step));
    return r;
  }

 private:
  void Hold() {
    ps_->backward_held.Notify();
    ps_->backward_release.WaitForNotification();
  }
  FakePs* ps_;
};

WorkerAssignment Assignment(int64_t steps, int64_t generation = 1) {
  static const std::string path = [] {
    std::string p = ::testing::TempDir() + "/worker_test.csv";
    std::ofstream(p) << "1,0\n2,1\n3,0\n4,1\n";
    return p;
  }();
  WorkerAssignment a;
  a.mutable_input()->set_format(InputDef::CSV);
  a.mutable_input()->set_batch_size(2);
  auto* f = a.mutable_input()->add_feature();
  f->set_name("x");
  f->add_shape(1);
  a.mutable_input()->mutable_train()->add_files(path);
  a.set_num_shards(1);
  a.set_start_step(0);
  a.set_end_step(steps);
  a.set_generation(generation);
  return a;
}

struct Harness {
  explicit Harness(WorkerOptions options = WorkerOptions{0, 99}) {
    WorkerDeps deps;
    deps.make_client = [this](const WorkerAssignment&) -> absl::StatusOr<std::unique_ptr<ParameterClient>> {
      return std::unique_ptr<ParameterClient>(new Forward(&ps));
    };
    deps.make_runner = [this](const WorkerAssignment&) -> absl::StatusOr<std::unique_ptr<StepRunner>> {
      if (absl::Notification* hold = hold_runner.exchange(nullptr)) {
        runner_entered.Notify();
        hold->WaitForNotification();
      }
      if (ps.buckets) return std::unique_ptr<StepRunner>(new StreamingRunner(&ps));
      return std::unique_ptr<StepRunner>(new QuadraticRunner());
    };
    deps.report_failure = [this](const absl::Status& s, int64_t step) {
      WorkerStatusResponse::State state = worker->Status().state();
      absl::MutexLock l(&mu);
      failures.push_back(absl::StrCat(step, ": ", s.message()));
      state_at_report.push_back(state);
    };
    worker = std::make_unique<WorkerRuntime>(options, deps);
  }
  // The worker owns its client; this one forwards to the shared fake.
  struct Forward : ParameterClient {
    explicit Forward(FakePs* p) : ps(p) {}
    absl::StatusOr<TensorMap> Pull(const std::vector<std::string>& v, int64_t s) override { return ps->Pull(v, s); }
    absl::StatusOr<TensorMap> PullRows(const RowRequest& r, int64_t s) override { return ps->PullRows(r, s); }
    absl::Status Push(const RequestId& id, const TensorMap& d,
                      const std::map<std::string, std::pair<Tensor, Tensor>>& sp) override {
      return ps->Push(id, d, sp);
    }
    std::unique_ptr<BucketedPush> StartBucketedPush(const RequestId& id, size_t) override {
      if (!ps->buckets) return nullptr;
      return std::make_unique<FakeParts>(ps, id);
    }
    FakePs* ps;
  };
  // The first failure reported to the chief ("" if none within 30 s).
  std::string FirstFailure() {
    absl::MutexLock l(&mu);
    auto reported = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !failures.empty(); };
    return mu.AwaitWithTimeout(absl::Condition(&reported), absl::Seconds(30)) ? failures[0] : "";
  }
  std::vector<int64_t> Pushed() {
    absl::MutexLock l(&ps.mu);
    return ps.pushed;
  }

  FakePs ps;
  // Set: the next make_runner waits on it (a Start held midway).
  std::atomic<absl::Notification*> hold_runner{nullptr};
  absl::Notification runner_entered;
  absl::Mutex mu;
  std::vector<std::string> failures;
  std::vector<WorkerStatusResponse::State> state_at_report;
  std::unique_ptr<WorkerRuntime> worker;
};

WorkerOptions Buckets() {
  WorkerOptions o{0, 99};
  o.push_bucket_bytes = 1;
  return o;
}

WorkerOptions OverlapPush() {
  WorkerOptions o{0, 99};
  o.overlap_push = true;
  return o;
}

std::vector<int64_t> Range(int64_t a, int64_t b) {
  std::vector<int64_t> v;
  for (int64_t i = a; i < b; ++i) v.push_back(i);
  return v;
}

TEST(WorkerTest, RunsEveryStepOnceAndLearns) {
  Harness h;
  ASSERT_TRUE(h.worker->Start(Assignment(60)).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 60));
  EXPECT_NEAR(h.ps.w, 3.0f, 1e-3);
  WorkerStatusResponse s = h.worker->Status();
  EXPECT_EQ(s.step(), 60);
  EXPECT_LT(s.loss(), 1e-4);
  EXPECT_EQ(s.incarnation(), 99u);
}

TEST(WorkerTest, PsFailureReportsAndWaitsThenResumesFromTheChiefsStep) {
  Harness h;
  h.ps.fail_pull_at = 5;
  ASSERT_TRUE(h.worker->Start(Assignment(10)).ok());
  // Wait for the worker to park itself after the failure.
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (h.worker->Status().state() != WorkerStatusResponse::PAUSED && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  WorkerStatusResponse s = h.worker->Status();
  ASSERT_EQ(s.state(), WorkerStatusResponse::PAUSED);
  EXPECT_THAT(s.error(), HasSubstr("ps:0 is gone"));
  EXPECT_EQ(h.Pushed(), Range(0, 5));
  {
    absl::MutexLock l(&h.mu);
    auto reported = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(h.mu) { return !h.failures.empty(); };
    ASSERT_TRUE(h.mu.AwaitWithTimeout(absl::Condition(&reported), absl::Seconds(30)));
    ASSERT_EQ(h.failures.size(), 1u);
    EXPECT_EQ(h.failures[0], "5: ps:0 is gone");
    // Already parked when the chief hears of it, so the chief finds it
    // PAUSED and resumes it once every PS answers.
    EXPECT_EQ(h.state_at_report[0], WorkerStatusResponse::PAUSED);
  }
  // The chief restored a checkpoint of step 3 and resumes from there.
  EXPECT_EQ(h.worker->Resume(3, 0).code(), absl::StatusCode::kAborted);  // stale generation
  ASSERT_TRUE(h.worker->Resume(3, 2).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  std::vector<int64_t> want = Range(0, 5);
  for (int64_t i = 3; i < 10; ++i) want.push_back(i);
  EXPECT_EQ(h.Pushed(), want);
}

TEST(WorkerTest, AStepInterruptedByPauseIsDroppedAndRecomputed) {
  Harness h;
  h.ps.block_pull_at = 4;
  ASSERT_TRUE(h.worker->Start(Assignment(8)).ok());
  h.ps.pulled_blocked.WaitForNotification();
  auto paused_at = h.worker->Pause(1, absl::Seconds(10));
  ASSERT_TRUE(paused_at.ok()) << paused_at.status();
  EXPECT_EQ(*paused_at, 4);
  EXPECT_EQ(h.worker->Status().state(), WorkerStatusResponse::PAUSED);
  h.ps.release.Notify();  // the pull returns, but the step must not be pushed
  ASSERT_TRUE(h.worker->Resume(4, 1).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 8));
}

// Early stopping (#25): a Resume with end_step ends the run there; one
// outside [start_step, the assignment's end] is refused, nothing changed.
TEST(WorkerTest, ResumeWithAnEarlierEndStepEndsThere) {
  Harness h;
  h.ps.block_pull_at = 4;
  ASSERT_TRUE(h.worker->Start(Assignment(20)).ok());
  h.ps.pulled_blocked.WaitForNotification();
  auto paused_at = h.worker->Pause(1, absl::Seconds(10));
  ASSERT_TRUE(paused_at.ok()) << paused_at.status();
  EXPECT_EQ(*paused_at, 4);
  h.ps.release.Notify();
  absl::Status s = h.worker->Resume(4, 1, ReplicaRoute(), 21);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ResumeRequest.end_step is 21"));
  s = h.worker->Resume(4, 1, ReplicaRoute(), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.worker->Status().state(), WorkerStatusResponse::PAUSED);  // refused: nothing changed
  ASSERT_TRUE(h.worker->Resume(4, 1, ReplicaRoute(), 7).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 7));
  EXPECT_EQ(h.worker->Status().step(), 7);
}

TEST(WorkerTest, ResumeWithEndStepAtItsStartIsDoneAtOnce) {
  Harness h;
  h.ps.block_pull_at = 5;
  ASSERT_TRUE(h.worker->Start(Assignment(20)).ok());
  h.ps.pulled_blocked.WaitForNotification();
  auto paused_at = h.worker->Pause(1, absl::Seconds(10));
  ASSERT_TRUE(paused_at.ok()) << paused_at.status();
  h.ps.release.Notify();
  ASSERT_TRUE(h.worker->Resume(*paused_at, 1, ReplicaRoute(), *paused_at).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, *paused_at));
}

TEST(WorkerTest, StartRulesAndBadAssignments) {
  Harness h;
  h.ps.block_pull_at = 1;
  ASSERT_TRUE(h.worker->Start(Assignment(5)).ok());
  EXPECT_EQ(h.worker->Start(Assignment(5)).code(), absl::StatusCode::kFailedPrecondition);
  h.ps.pulled_blocked.WaitForNotification();
  h.ps.release.Notify();
  // A newer generation (a restarted chief) replaces the run.
  ASSERT_TRUE(h.worker->Start(Assignment(3, 2)).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);

  WorkerAssignment bad = Assignment(5, 3);
  bad.mutable_input()->mutable_train()->set_files(0, "/nonexistent.csv");
  absl::Status s = h.worker->Start(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(h.worker->Status().state(), WorkerStatusResponse::FAILED);
  EXPECT_THAT(h.worker->Status().error(), HasSubstr("/nonexistent.csv"));
}

// Two Starts at once used to race to reassign the loop's thread (and crash
// the worker): the second is refused while the first is under way.
TEST(WorkerTest, AConcurrentStartIsRefusedNotRaced) {
  Harness h;
  absl::Notification release;
  h.hold_runner = &release;
  absl::Status first;
  std::thread starter([&] { first = h.worker->Start(Assignment(5)); });
  h.runner_entered.WaitForNotification();
  absl::Status second = h.worker->Start(Assignment(5, 2));
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.message()), HasSubstr("under way"));
  release.Notify();
  starter.join();
  ASSERT_TRUE(first.ok()) << first;
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
}

// ASYNC: step t's push overlaps step t+1's pull and compute, and still
// every step is pushed once, in order.
TEST(WorkerTest, APushOverlapsTheNextStepInOrderAndOnce) {
  Harness h(OverlapPush());
  h.ps.block_push_at = 2;
  ASSERT_TRUE(h.worker->Start(Assignment(10)).ok());
  {
    // Step 4's parameters are pulled while step 2's push is held: they are
    // prefetched when step 3 starts, so step 3 ran meanwhile.
    absl::MutexLock l(&h.ps.mu);
    auto pulled_4 = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(h.ps.mu) {
      return std::find(h.ps.pulled.begin(), h.ps.pulled.end(), 4) != h.ps.pulled.end();
    };
    ASSERT_TRUE(h.ps.mu.AwaitWithTimeout(absl::Condition(&pulled_4), absl::Seconds(30)));
    EXPECT_EQ(h.ps.pushed, Range(0, 2));  // and step 3's push waits for step 2's
  }
  h.ps.push_release.Notify();
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 10));
  EXPECT_EQ(h.worker->Status().step(), 10);
}

// A push behind that fails takes the worker back to its step: the step
// computed meanwhile is not pushed, the failure is reported as the push's.
TEST(WorkerTest, AFailedPushBehindParksAtItsStep) {
  Harness h(OverlapPush());
  h.ps.fail_push_at = 5;
  ASSERT_TRUE(h.worker->Start(Assignment(10)).ok());
  {
    absl::MutexLock l(&h.mu);
    auto reported = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(h.mu) { return !h.failures.empty(); };
    ASSERT_TRUE(h.mu.AwaitWithTimeout(absl::Condition(&reported), absl::Seconds(30)));
    EXPECT_EQ(h.failures[0], "5: push refused");
    EXPECT_EQ(h.state_at_report[0], WorkerStatusResponse::PAUSED);
  }
  absl::StatusOr<int64_t> paused_at = h.worker->Pause(1, absl::Seconds(10));
  ASSERT_TRUE(paused_at.ok()) << paused_at.status();
  EXPECT_EQ(*paused_at, 5);
  EXPECT_EQ(h.Pushed(), Range(0, 5));
  ASSERT_TRUE(h.worker->Resume(5, 2).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 10));
  absl::MutexLock l(&h.mu);
  EXPECT_EQ(h.failures.size(), 1u);
}

// A push behind that times out is run again by the worker itself.
TEST(WorkerTest, ATimedOutPushBehindIsRetried) {
  Harness h(OverlapPush());
  h.ps.fail_push_at = 3;
  h.ps.fail_push_code = absl::StatusCode::kDeadlineExceeded;
  ASSERT_TRUE(h.worker->Start(Assignment(8)).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 8));
}

// Bucketed push: each step's gradient leaves while its backward pass still
// runs, and the step counts once, after the backward pass, in order.
TEST(WorkerTest, BucketsLeaveDuringTheBackwardPassAndEachStepCountsOnce) {
  Harness h(Buckets());
  h.ps.buckets = true;
  ASSERT_TRUE(h.worker->Start(Assignment(60)).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 60));
  EXPECT_NEAR(h.ps.w, 3.0f, 1e-3);
  absl::MutexLock l(&h.ps.mu);
  ASSERT_EQ(h.ps.events.size(), 180u) << absl::StrJoin(h.ps.events, ", ");
  for (int64_t s = 0; s < 60; ++s) {
    EXPECT_EQ(h.ps.events[3 * s], absl::StrCat("part ", s));
    EXPECT_EQ(h.ps.events[3 * s + 1], absl::StrCat("backward ", s));
    EXPECT_EQ(h.ps.events[3 * s + 2], absl::StrCat("finish ", s));
  }
}

// Once a part has left, the step's push is under way: a Pause waits for
// the rest of it, and the step counts as pushed.
TEST(WorkerTest, APauseAfterTheFirstBucketWaitsForTheWholeStep) {
  Harness h(Buckets());
  h.ps.buckets = true;
  h.ps.hold_at = 4;
  ASSERT_TRUE(h.worker->Start(Assignment(8)).ok());
  h.ps.backward_held.WaitForNotification();
  // Step 4's first part has left and its backward pass is held: a Pause
  // cannot return before the rest of the step is pushed.
  absl::StatusOr<int64_t> paused_at = h.worker->Pause(1, absl::Milliseconds(100));
  EXPECT_EQ(paused_at.status().code(), absl::StatusCode::kDeadlineExceeded) << paused_at.status();
  EXPECT_EQ(h.Pushed(), Range(0, 4));
  h.ps.backward_release.Notify();
  paused_at = h.worker->Pause(1, absl::Seconds(30));
  ASSERT_TRUE(paused_at.ok()) << paused_at.status();
  EXPECT_EQ(*paused_at, 5);
  EXPECT_EQ(h.Pushed(), Range(0, 5));
  ASSERT_TRUE(h.worker->Resume(5, 1).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 8));
}

// A Pause before any part left drops the step as before any push: nothing
// of it reaches the PS, and it is computed again after the Resume.
TEST(WorkerTest, APauseBeforeTheFirstBucketDropsTheStep) {
  Harness h(Buckets());
  h.ps.buckets = true;
  h.ps.hold_at = 4;
  h.ps.hold_before_part = true;
  ASSERT_TRUE(h.worker->Start(Assignment(8)).ok());
  h.ps.backward_held.WaitForNotification();
  absl::StatusOr<int64_t> paused_at = h.worker->Pause(1, absl::Seconds(10));
  ASSERT_TRUE(paused_at.ok()) << paused_at.status();
  EXPECT_EQ(*paused_at, 4);
  float w_at_pause;
  {
    absl::MutexLock l(&h.ps.mu);
    w_at_pause = h.ps.w;
    h.ps.hold_at = -1;
  }
  h.ps.backward_release.Notify();
  // The held step ends its backward pass and is dropped: the worker is
  // paused, so waiting for its loop to park shows no part of it left.
  {
    absl::MutexLock l(&h.ps.mu);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(h.ps.mu) {
      return !h.ps.events.empty() && h.ps.events.back() == "backward 4";
    };
    ASSERT_TRUE(h.ps.mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30)));
    EXPECT_EQ(h.ps.w, w_at_pause);
    EXPECT_EQ(std::count(h.ps.events.begin(), h.ps.events.end(), "part 4"), 0);
  }
  ASSERT_TRUE(h.worker->Resume(4, 1).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 8));
  absl::MutexLock l(&h.ps.mu);
  EXPECT_EQ(std::count(h.ps.events.begin(), h.ps.events.end(), "part 4"), 1);
}

// A bucketed push that fails parks and reports like a whole one.
TEST(WorkerTest, AFailedBucketedPushParksAtItsStep) {
  Harness h(Buckets());
  h.ps.buckets = true;
  h.ps.fail_push_at = 3;
  ASSERT_TRUE(h.worker->Start(Assignment(6)).ok());
  EXPECT_EQ(h.FirstFailure(), "3: push refused");
  EXPECT_EQ(h.Pushed(), Range(0, 3));
  ASSERT_TRUE(h.worker->Resume(3, 2).ok());
  EXPECT_EQ(h.worker->WaitFinished(absl::Seconds(60)), WorkerStatusResponse::DONE);
  EXPECT_EQ(h.Pushed(), Range(0, 6));
}

}  // namespace
}  // namespace psrt
