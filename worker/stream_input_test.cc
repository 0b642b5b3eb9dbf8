#include "worker/stream_input.h"

#include <atomic>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// 36 CSV rows, label i: three streams of 12 examples, 4 batches of 3 an epoch.
WorkerAssignment Assignment(const std::vector<StreamPos>& streams, int64_t start_step) {
  const std::string path = ::testing::TempDir() + "/rows36.csv";
  std::ofstream out(path);
  out << "x,label\n";
  for (int i = 0; i < 36; ++i) out << i << "," << i << "\n";
  out.close();
  WorkerAssignment a;
  a.mutable_input()->set_format(InputDef::CSV);
  a.mutable_input()->set_batch_size(3);
  a.mutable_input()->set_label_key("label");
  auto* f = a.mutable_input()->add_feature();
  f->set_name("x");
  f->add_shape(1);
  a.mutable_input()->mutable_train()->add_files(path);
  a.set_seed(7);
  a.set_num_shards(3);
  a.set_start_step(start_step);
  for (const StreamPos& p : streams) {
    DataStream* d = a.add_stream();
    d->set_index(p.index);
    d->set_start_batch(p.batch);
  }
  return a;
}

const MakeDataset Make = ShardDataset;

// Reads `steps` batches, recording each label (an example) read.
void Read(StreamInput* in, int steps, std::map<int, int>* seen) {
  Batch b;
  for (int s = 0; s < steps; ++s) {
    auto more = in->Next(&b);
    ASSERT_TRUE(more.ok() && *more) << more.status();
    for (int64_t i = 0; i < b.size; ++i) ++(*seen)[static_cast<int>(b.tensors.at(kLabelKey).data<float>()[i])];
  }
}

// Worker A holds streams 0 and 2, is stopped after 5 steps (one of them
// dropped by a pause and read again after a Seek), and stream 2 goes on at
// a joiner B: every example of streams 0 and 2 in the epoch is read once.
TEST(StreamInputTest, AStreamHandedOverMidEpochIsReadOnce) {
  const std::vector<StreamPos> held = {{0, 0}, {2, 0}};
  auto a = StreamInput::Create(Assignment(held, 0), Make);
  ASSERT_TRUE(a.ok()) << a.status();
  std::map<int, int> seen;
  Read(a->get(), 4, &seen);
  Batch dropped;
  ASSERT_TRUE((*a)->Next(&dropped).ok());  // step 4 read, then dropped by a pause
  ASSERT_TRUE((*a)->Seek(4).ok());
  EXPECT_EQ((*a)->next_step(), 4);
  Read(a->get(), 1, &seen);  // step 4 again
  EXPECT_EQ(BatchOf(Assignment(held, 0), 4), (StreamPos{0, 2}));

  // The chief's deal at step 5: A keeps stream 0 (at batch 3), B takes 2.
  const std::vector<StreamPos> at = PositionsAt(held, 0, 5);
  ASSERT_EQ(at, (std::vector<StreamPos>{{0, 3}, {2, 2}}));
  auto a2 = StreamInput::Create(Assignment({at[0]}, 5), Make);
  auto b = StreamInput::Create(Assignment({at[1]}, 5), Make);
  ASSERT_TRUE(a2.ok() && b.ok());
  Read(a2->get(), 1, &seen);
  Read(b->get(), 2, &seen);
  for (int label = 0; label < 36; ++label) {
    EXPECT_EQ(seen[label], label % 3 == 1 ? 0 : 1) << "example " << label;
  }
}

// A new assignment keeping a stream takes its dataset over from the old
// input and reads it forward: no batch of it is built again or skipped.
TEST(StreamInputTest, AKeptStreamMovesOverToTheNextAssignment) {
  std::atomic<int> built{0};  // datasets are built on other threads
  MakeDataset counting = [&built](const WorkerAssignment& a) {
    ++built;
    return Make(a);
  };
  auto a = StreamInput::Create(Assignment({{0, 0}, {1, 0}}, 0), counting);
  ASSERT_TRUE(a.ok()) << a.status();
  std::map<int, int> seen;
  Read(a->get(), 3, &seen);  // stream 0: batches 0, 1; stream 1: batch 0
  EXPECT_EQ(built, 2);
  // Stream 0 goes on here from batch 1 (a later deal saw it there: one
  // batch back, kept) and stream 2 is new.
  auto b = StreamInput::Create(Assignment({{0, 1}, {2, 0}}, 3), counting, a->get());
  ASSERT_TRUE(b.ok()) << b.status();
  std::map<int, int> again;
  Read(b->get(), 4, &again);  // stream 0: 1, 2; stream 2: 0, 1
  EXPECT_EQ(built, 3);  // only stream 2 was built again
  int from_stream0 = 0;
  for (auto [label, n] : again) from_stream0 += label % 3 == 0 ? n : 0;
  EXPECT_EQ(from_stream0, 6);
}

TEST(StreamInputTest, WithoutStreamsTheShardIsReadAtItsStep) {
  WorkerAssignment a = Assignment({}, 2);
  a.set_shard_index(1);
  EXPECT_EQ(BatchOf(a, 6), (StreamPos{1, 6}));
  auto in = StreamInput::Create(a, Make);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ((*in)->next_step(), 2);
}

}  // namespace
}  // namespace psrt
