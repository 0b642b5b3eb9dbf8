#include "common/rpc/retry.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

// A clock that moves only when slept on; randomness fixed.
class FakeEnv : public Env {
 public:
  absl::Time Now() override { return now_; }
  void SleepFor(absl::Duration d) override {
    sleeps.push_back(d);
    now_ += d;
  }
  double RandomFraction() override { return fraction; }

  std::vector<absl::Duration> sleeps;
  double fraction = 0.5;  // no jitter

 private:
  absl::Time now_ = absl::UnixEpoch();
};

TEST(BackoffTest, GrowsGeometricallyToTheCap) {
  FakeEnv env;
  BackoffOptions o;
  o.initial = absl::Milliseconds(100);
  o.max = absl::Milliseconds(500);
  Backoff b(o, &env);
  EXPECT_EQ(b.NextDelay(), absl::Milliseconds(100));
  EXPECT_EQ(b.NextDelay(), absl::Milliseconds(200));
  EXPECT_EQ(b.NextDelay(), absl::Milliseconds(400));
  EXPECT_EQ(b.NextDelay(), absl::Milliseconds(500));
  EXPECT_EQ(b.NextDelay(), absl::Milliseconds(500));
  EXPECT_EQ(b.attempts(), 5);
}

TEST(BackoffTest, JitterStaysWithinItsBand) {
  FakeEnv env;
  BackoffOptions o;
  o.initial = absl::Milliseconds(100);
  o.jitter = 0.2;
  env.fraction = 0.0;
  EXPECT_EQ(Backoff(o, &env).NextDelay(), absl::Milliseconds(80));
  env.fraction = 0.999999;
  absl::Duration d = Backoff(o, &env).NextDelay();
  EXPECT_GT(d, absl::Milliseconds(119));
  EXPECT_LE(d, absl::Milliseconds(120));
}

TEST(RetryTest, RetriesUnavailableUntilSuccess) {
  FakeEnv env;
  int calls = 0;
  absl::Status s = RetryOnUnavailable(BackoffOptions(), [&] {
    return ++calls < 4 ? absl::UnavailableError("down") : absl::OkStatus();
  }, &env);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(env.sleeps.size(), 3u);
}

TEST(RetryTest, OtherErrorsAreNotRetried) {
  FakeEnv env;
  int calls = 0;
  absl::Status s = RetryOnUnavailable(BackoffOptions(), [&] {
    ++calls;
    return absl::InvalidArgumentError("bad shape");
  }, &env);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 1);
}

TEST(RetryTest, GivesUpAtTheDeadlineSayingHowLong) {
  FakeEnv env;
  BackoffOptions o;
  o.deadline = absl::Seconds(5);
  int calls = 0;
  absl::Status s = RetryOnUnavailable(o, [&] {
    ++calls;
    return absl::UnavailableError("ps:0 down");
  }, &env);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ps:0 down (gave up after"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("deadline"));
  EXPECT_LE(env.Now() - absl::UnixEpoch(), absl::Seconds(5));
  EXPECT_GT(calls, 3);
}

TEST(RetryTest, AttemptLimitAndStop) {
  FakeEnv env;
  BackoffOptions o;
  o.max_attempts = 3;
  int calls = 0;
  absl::Status s = RetryOnUnavailable(o, [&] {
    ++calls;
    return absl::UnavailableError("x");
  }, &env);
  EXPECT_EQ(calls, 3);
  EXPECT_THAT(std::string(s.message()), HasSubstr("attempt limit"));

  BackoffOptions stop;
  stop.should_stop = [&] { return calls >= 5; };
  s = RetryOnUnavailable(stop, [&] {
    ++calls;
    return absl::UnavailableError("x");
  }, &env);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace psrt
