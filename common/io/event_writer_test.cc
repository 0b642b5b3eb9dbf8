#include "common/io/event_writer.h"

#include <map>
#include <fstream>
#include <sstream>

#include "common/testing/python_tool.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(EventWriterTest, TensorBoardLoadsEveryScalar) {
  std::string dir = ::testing::TempDir() + "/events/run1";
  auto w = EventWriter::Create(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int step = 0; step < 50; step += 10) {
    ASSERT_TRUE((*w)->AddScalar("loss", step, 2.0f / (step + 1)).ok());
    ASSERT_TRUE((*w)->AddScalar("examples_per_sec", step, 1000.0f + step).ok());
  }
  ASSERT_TRUE((*w)->AddScalar("accuracy", 40, 0.875f).ok());
  ASSERT_TRUE((*w)->Flush().ok());

  std::string out = ::testing::TempDir() + "/scalars.txt";
  absl::Status s = testing::RunPythonTool("tests/tools/read_events.py", {dir}, out);
  ASSERT_TRUE(s.ok()) << s;

  std::ifstream in(out);
  std::map<std::string, std::vector<std::pair<int64_t, float>>> got;
  std::string tag;
  int64_t step;
  float value;
  while (in >> tag >> step >> value) got[tag].emplace_back(step, value);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(got["loss"].size(), 5u);
  ASSERT_EQ(got["examples_per_sec"].size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got["loss"][i].first, i * 10);
    EXPECT_FLOAT_EQ(got["loss"][i].second, 2.0f / (i * 10 + 1));
    EXPECT_FLOAT_EQ(got["examples_per_sec"][i].second, 1000.0f + i * 10);
  }
  ASSERT_EQ(got["accuracy"].size(), 1u);
  EXPECT_EQ(got["accuracy"][0], std::make_pair(int64_t{40}, 0.875f));
}

}  // namespace
}  // namespace psrt
