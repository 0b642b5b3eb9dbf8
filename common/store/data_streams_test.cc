#include "common/store/data_streams.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

using Names = std::set<std::string>;

TEST(DataStreamsTest, APartOfABatchIsTakenOnceAndTheBatchOnceWhole) {
  DataStreams s;
  EXPECT_FALSE(s.Done(0, 5));
  EXPECT_EQ(s.Take(0, 5, {"w", "w"}), Names({"w"}));
  EXPECT_TRUE(s.InProgress(0, 5));
  EXPECT_EQ(s.InProgress().at(0), 5);
  EXPECT_TRUE(s.next().empty());
  // Cut into other buckets the second time: only what is missing.
  EXPECT_EQ(s.Take(0, 5, {"v", "w", "emb"}), Names({"v", "emb"}));
  EXPECT_TRUE(s.Take(0, 5, {}).empty());
  s.Complete(0, 5);
  EXPECT_TRUE(s.Done(0, 5));
  EXPECT_TRUE(s.Done(0, 4));
  EXPECT_FALSE(s.Done(0, 6));
  EXPECT_FALSE(s.Done(1, 0));
  EXPECT_TRUE(s.InProgress().empty());
  EXPECT_EQ(s.next().at(0), 6);
  s.Clear();
  EXPECT_FALSE(s.Done(0, 5));
}

TEST(DataStreamsTest, BatchesInProgressAreBounded) {
  DataStreams s;
  for (int64_t b = 0; b < 100; ++b) s.Take(3, b, {"w"});
  EXPECT_EQ(s.InProgress().at(3), 100 - static_cast<int64_t>(DataStreams::kOpenBatches));
  EXPECT_FALSE(s.InProgress(3, 0));
  s.Complete(3, 97);  // the ones below go with it
  EXPECT_TRUE(s.InProgress(3, 99));
  EXPECT_EQ(s.InProgress().at(3), 98);
}

}  // namespace
}  // namespace psrt
