#include "common/io/record_io.h"

#include <fstream>
#include <sstream>

#include "common/io/crc32c.h"
#include "common/testing/python_tool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

absl::StatusOr<std::vector<std::string>> ReadAll(const std::string& path) {
  auto reader = RecordReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::vector<std::string> out;
  std::string rec;
  while (true) {
    auto more = (*reader)->Next(&rec);
    if (!more.ok()) return more.status();
    if (!*more) return out;
    out.push_back(rec);
  }
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(crc32c::Value("123456789", 9), 0xe3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c::Value(zeros.data(), 32), 0x8a9136aau);
  std::string ones(32, '\xff');
  EXPECT_EQ(crc32c::Value(ones.data(), 32), 0x62a8ab43u);
  // Extending piecewise equals one pass.
  EXPECT_EQ(crc32c::Extend(crc32c::Value("12345", 5), "6789", 4), 0xe3069283u);
  EXPECT_EQ(crc32c::Unmask(crc32c::Mask(0x12345678u)), 0x12345678u);
}

TEST(RecordIoTest, RoundTrip) {
  std::string path = TempPath("rt.tfrecord");
  {
    auto w = RecordWriter::Open(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("alpha").ok());
    ASSERT_TRUE((*w)->Write("").ok());
    ASSERT_TRUE((*w)->Write(std::string(100000, 'z')).ok());
    ASSERT_TRUE((*w)->Flush(true).ok());
  }
  auto recs = ReadAll(path);
  ASSERT_TRUE(recs.ok()) << recs.status();
  ASSERT_EQ(recs->size(), 3u);
  EXPECT_EQ((*recs)[0], "alpha");
  EXPECT_EQ((*recs)[1], "");
  EXPECT_EQ((*recs)[2].size(), 100000u);
}

TEST(RecordIoTest, EveryTruncationAndFlippedByteIsDataLossNamingFileAndRecord) {
  std::string path = TempPath("cut.tfrecord");
  {
    auto w = RecordWriter::Open(path);
    ASSERT_TRUE((*w)->Write("first").ok());
    ASSERT_TRUE((*w)->Write("second record").ok());
  }
  std::string full = Slurp(path);
  std::string cut_path = TempPath("cut2.tfrecord");
  for (size_t cut = 1; cut < full.size(); ++cut) {
    if (cut == 12 + 5 + 4) continue;  // a whole first record is a valid file
    Spit(cut_path, full.substr(0, cut));
    auto recs = ReadAll(cut_path);
    ASSERT_FALSE(recs.ok()) << "cut at " << cut;
    EXPECT_EQ(recs.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(recs.status().message()), HasSubstr(cut_path));
  }
  std::string flipped = full;
  flipped[12 + 5 + 4 + 12 + 3] ^= 1;  // inside the second record's data
  Spit(cut_path, flipped);
  auto recs = ReadAll(cut_path);
  EXPECT_THAT(std::string(recs.status().message()), HasSubstr("record 1 at byte 21: data CRC mismatch"));
  EXPECT_EQ(RecordReader::Open(TempPath("missing")).status().code(), absl::StatusCode::kNotFound);
}

// Found by tests/fuzz/record_io_fuzzer: a length with a matching CRC made
// the reader allocate up to 4 GiB before finding the data missing.
TEST(RecordIoTest, ALengthPastTheEndOfTheFileIsRefusedBeforeAllocating) {
  std::string header(12, '\0');
  const uint64_t length = uint64_t{3} << 30;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  const uint32_t crc = crc32c::Mask(crc32c::Value(header.data(), 8));
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  std::string path = TempPath("huge_length.tfrecord");
  Spit(path, header + "abc");
  auto recs = ReadAll(path);
  EXPECT_EQ(recs.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(recs.status().message()), HasSubstr("the file has 3 left"));
}

TEST(RecordIoTest, ReadsWhatTensorBoardWritesAndWritesWhatItWould) {
  std::string theirs = TempPath("tensorboard.tfrecord");
  ASSERT_TRUE(testing::RunPythonTool("tests/tools/write_tfrecords.py", {"framing", theirs}).ok());
  auto recs = ReadAll(theirs);
  ASSERT_TRUE(recs.ok()) << recs.status();
  ASSERT_EQ(recs->size(), 6u);
  EXPECT_EQ((*recs)[3].substr(0, 9), "record-3-");
  EXPECT_EQ((*recs)[3].size(), 9 + 21u);
  EXPECT_EQ((*recs)[5], "");

  // Our writer, given the same records, produces the same bytes.
  std::string ours = TempPath("ours.tfrecord");
  {
    auto w = RecordWriter::Open(ours);
    for (const auto& r : *recs) ASSERT_TRUE((*w)->Write(r).ok());
  }
  EXPECT_EQ(Slurp(ours), Slurp(theirs));
}

}  // namespace
}  // namespace psrt
