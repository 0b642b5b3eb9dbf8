#include "common/input/streams.h"

#include <set>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(StreamsTest, RoundRobinOneBatchAStep) {
  std::vector<StreamPos> s = {{3, 10}, {5, 0}};
  EXPECT_EQ(StreamAt(s, 100, 100), (StreamPos{3, 10}));
  EXPECT_EQ(StreamAt(s, 100, 101), (StreamPos{5, 0}));
  EXPECT_EQ(StreamAt(s, 100, 102), (StreamPos{3, 11}));
  EXPECT_EQ(PositionsAt(s, 100, 100), s);
  EXPECT_EQ(PositionsAt(s, 100, 101), (std::vector<StreamPos>{{3, 11}, {5, 0}}));
  EXPECT_EQ(PositionsAt(s, 100, 103), (std::vector<StreamPos>{{3, 12}, {5, 1}}));
  // Before base (a restore rewinds the worker): counted back.
  std::vector<StreamPos> t = {{3, 10}, {5, 4}};
  EXPECT_EQ(PositionsAt(t, 100, 98), (std::vector<StreamPos>{{3, 9}, {5, 3}}));
  EXPECT_EQ(StreamAt(t, 100, 98), (StreamPos{3, 9}));
  EXPECT_EQ(StreamAt(t, 100, 99), (StreamPos{5, 3}));
  EXPECT_EQ(PositionsAt(t, 100, 0)[0].batch, 0);  // never below 0
}

TEST(StreamsTest, StartDealsOneStreamPerWorkerInOrder) {
  std::map<int, std::vector<StreamPos>> d;
  ASSERT_TRUE(Deal(2, {0, 1}, {}, &d).ok());
  EXPECT_EQ(d[0], (std::vector<StreamPos>{{0, 0}}));
  EXPECT_EQ(d[1], (std::vector<StreamPos>{{1, 0}}));
}

// Every batch of every stream is read once, by someone, across a join and a
// leave at arbitrary steps of workers running apart (ASYNC).
TEST(StreamsTest, EveryBatchOnceAcrossJoinAndLeave) {
  const int kStreams = 4;
  std::map<int, std::vector<StreamPos>> held;
  std::map<int, int64_t> base, step;
  ASSERT_TRUE(Deal(kStreams, {0, 1}, {}, &held).ok());
  std::map<int, std::multiset<int64_t>> read;  // stream -> batches read
  auto run = [&](int w, int64_t steps) {
    for (int64_t k = 0; k < steps; ++k, ++step[w]) {
      StreamPos p = StreamAt(held[w], base[w], step[w]);
      read[p.index].insert(p.batch);
    }
  };
  auto redeal = [&](const std::vector<int>& members) {
    std::map<int, std::vector<StreamPos>> now;
    for (auto& [w, s] : held) now[w] = PositionsAt(s, base[w], step[w]);
    ASSERT_TRUE(Deal(kStreams, members, now, &held).ok());
    for (int w : members) base[w] = step[w];
  };
  run(0, 7);
  run(1, 3);
  step[2] = 5;
  redeal({0, 1, 2});  // worker 2 joins
  EXPECT_EQ(held[0].size() + held[1].size() + held[2].size(), 4u);
  run(0, 5);
  run(1, 9);
  run(2, 4);
  redeal({0, 2});  // worker 1 leaves
  EXPECT_EQ(held.count(1), 0u);
  run(0, 11);
  run(2, 6);
  for (auto& [w, s] : held) {
    for (const StreamPos& p : PositionsAt(s, base[w], step[w])) {
      const std::multiset<int64_t>& r = read[p.index];
      EXPECT_EQ(static_cast<int64_t>(r.size()), p.batch) << "stream " << p.index;
      for (int64_t b = 0; b < p.batch; ++b) EXPECT_EQ(r.count(b), 1u) << "stream " << p.index << " batch " << b;
    }
  }
}

TEST(StreamsTest, RefusesMoreWorkersThanStreams) {
  std::map<int, std::vector<StreamPos>> d;
  absl::Status s = Deal(2, {0, 1, 2}, {}, &d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_workers"), std::string::npos);
  EXPECT_FALSE(Deal(2, {}, {}, &d).ok());
  EXPECT_FALSE(Deal(2, {0}, {{0, {{1, 0}}}, {1, {{1, 4}}}}, &d).ok());  // stream 1 twice
}

}  // namespace
}  // namespace psrt
