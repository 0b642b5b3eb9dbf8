#include "worker/step_prefetcher.h"

#include <atomic>

#include "gtest/gtest.h"

namespace psrt {
namespace {

StepPrefetcher::Fetch Counting(std::atomic<int>* fetches) {
  return [fetches](int64_t step, StepInputs* in) {
    ++*fetches;
    in->batch.size = static_cast<int>(step);
  };
}

TEST(StepPrefetcherTest, HandsOverTheInputsOfTheStepAndTagItFetched) {
  std::atomic<int> fetches{0};
  StepPrefetcher p(Counting(&fetches));
  EXPECT_FALSE(p.Take(3, 1).has_value());  // nothing started
  p.Start(3, 1);
  std::optional<StepInputs> in = p.Take(3, 1);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->batch.size, 3);
  EXPECT_FALSE(p.Take(3, 1).has_value());  // taken once
  EXPECT_EQ(fetches, 1);
}

TEST(StepPrefetcherTest, InputsFetchedUnderAnotherTagOrStepAreDiscarded) {
  std::atomic<int> fetches{0};
  StepPrefetcher p(Counting(&fetches));
  p.Start(4, 1);
  EXPECT_FALSE(p.Take(4, 2).has_value());  // a pause or resume came between
  p.Start(5, 2);
  EXPECT_FALSE(p.Take(4, 2).has_value());  // another step (a retry)
  p.Start(6, 2);
  p.Drop();
  EXPECT_FALSE(p.Take(6, 2).has_value());
  EXPECT_EQ(fetches, 3);  // every started fetch ran to its end
}

}  // namespace
}  // namespace psrt
