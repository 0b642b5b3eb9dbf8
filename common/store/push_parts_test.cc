#include "common/store/push_parts.h"

#include "common/store/push_part_id.h"

#include "common/transport/ps_types.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

RequestId Part(int64_t step, int bucket, bool last, int worker = 0, uint64_t incarnation = 1) {
  return PartId(worker, incarnation, step, bucket, last);
}

TEST(PushPartsTest, StepCompletesOnlyWithEveryPartInAnyOrder) {
  PushParts parts;
  EXPECT_FALSE(*parts.Take(Part(5, 3, true)));  // the last first
  EXPECT_TRUE(parts.Seen(Part(5, 3, true)));
  EXPECT_FALSE(parts.Seen(Part(5, 1, false)));
  EXPECT_FALSE(*parts.Take(Part(5, 1, false)));
  EXPECT_TRUE(*parts.Take(Part(5, 2, false)));
  // A complete step leaves: the PS's record of whole steps answers for it.
  EXPECT_FALSE(parts.Seen(Part(5, 2, false)));
}

TEST(PushPartsTest, WholeStepPushIsCompleteAndLeavesNothing) {
  PushParts parts;
  EXPECT_TRUE(*parts.Take(Part(1, 0, false)));
  EXPECT_FALSE(parts.Seen(Part(1, 0, false)));
}

TEST(PushPartsTest, PartsOfStepsAndWorkersAreApart) {
  PushParts parts;
  EXPECT_FALSE(*parts.Take(Part(1, 1, false, 0)));
  EXPECT_FALSE(parts.Seen(Part(2, 1, false, 0)));
  EXPECT_FALSE(parts.Seen(Part(1, 1, false, 1)));
  EXPECT_TRUE(*parts.Take(Part(1, 1, true, 1)));  // worker 1's step had one part
  EXPECT_TRUE(*parts.Take(Part(1, 2, true, 0)));
}

TEST(PushPartsTest, NewIncarnationForgetsThePredecessorsParts) {
  PushParts parts;
  EXPECT_FALSE(*parts.Take(Part(1, 1, false, 0, 1)));
  EXPECT_FALSE(parts.Seen(Part(1, 1, false, 0, 2)));
  EXPECT_FALSE(*parts.Take(Part(1, 1, false, 0, 2)));
  EXPECT_FALSE(parts.Seen(Part(1, 1, false, 0, 1)));
}

TEST(PushPartsTest, ContradictoryPartsAreRefusedAndChangeNothing) {
  PushParts parts;
  ASSERT_FALSE(*parts.Take(Part(1, 2, true)));
  EXPECT_EQ(parts.Take(Part(1, 3, false)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parts.Take(Part(1, 1, true)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(parts.Seen(Part(1, 1, false)));
  EXPECT_FALSE(parts.Seen(Part(1, 3, false)));
  ASSERT_FALSE(*parts.Take(Part(2, 4, false)));
  EXPECT_EQ(parts.Take(Part(2, 3, true)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(*parts.Take(Part(1, 1, false)));
}

TEST(PushPartsTest, CheckNamesMalformedFields) {
  EXPECT_TRUE(PushParts::Check(Part(1, 0, false)).ok());
  EXPECT_TRUE(PushParts::Check(Part(1, kMaxPushBuckets, true)).ok());
  absl::Status s = PushParts::Check(Part(1, -1, false));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bucket -1"), absl::string_view::npos) << s;
  EXPECT_EQ(PushParts::Check(Part(1, kMaxPushBuckets + 1, false)).code(), absl::StatusCode::kInvalidArgument);
  s = PushParts::Check(Part(1, 0, true));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("last_bucket"), absl::string_view::npos) << s;
}

TEST(PushPartsTest, OpenStepsAreBounded) {
  PushParts parts;
  for (int64_t step = 0; step < static_cast<int64_t>(PushParts::kOpenSteps) + 10; ++step) {
    ASSERT_FALSE(*parts.Take(Part(step, 1, false)));
  }
  EXPECT_FALSE(parts.Seen(Part(0, 1, false)));  // the oldest were forgotten
  EXPECT_TRUE(parts.Seen(Part(PushParts::kOpenSteps + 9, 1, false)));
}

}  // namespace
}  // namespace psrt
