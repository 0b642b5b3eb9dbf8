#include "common/io/record_io.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/io/crc32c.h"
#include "common/testing/compress.h"
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

absl::StatusOr<std::vector<std::string>> ReadAll(const std::string& path,
                                                 Compression compression = Compression::kAuto) {
  auto reader = RecordReader::Open(path, compression);
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

// A record header claiming `length` bytes, with the CRC that makes it pass.
std::string ForgedHeader(uint64_t length) {
  std::string header(12, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  const uint32_t crc = crc32c::Mask(crc32c::Value(header.data(), 8));
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  return header;
}

// Found by tests/fuzz/record_io_fuzzer: a length with a matching CRC made
// the reader allocate up to 4 GiB before finding the data missing.
TEST(RecordIoTest, ALengthPastTheEndOfTheFileIsRefusedBeforeAllocating) {
  const std::string header = ForgedHeader(uint64_t{3} << 30);
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

// Files TensorFlow 2.21 writes with TFRecordOptions(compression_type=""),
// "GZIP" and "ZLIB" (tests/tools/write_with_tensorflow.py), written once.
class CompressedRecordsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/tf_compressed");
    ASSERT_EQ(std::system(("mkdir -p " + *dir_).c_str()), 0);
    absl::Status s = testing::RunPythonTool("tests/tools/write_with_tensorflow.py", {*dir_}, "",
                                            testing::kVenvTfPython);
    ASSERT_TRUE(s.ok()) << s;
  }
  static std::string Path(const std::string& name) { return *dir_ + "/" + name; }
  static std::string* dir_;
};
std::string* CompressedRecordsTest::dir_ = nullptr;

TEST_F(CompressedRecordsTest, ReadsGzipAndZlibThatTensorFlowWroteDetectedOrConfigured) {
  auto plain = ReadAll(Path("records.tfrecord"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(plain->size(), 300u);
  EXPECT_EQ((*plain)[7].substr(0, 9), "record-7-");
  EXPECT_EQ((*plain)[7].size(), 9 + 7 * 97u);
  // Bigger than one 64 KiB chunk of compressed input several times over.
  ASSERT_GT(Slurp(Path("records.gzip.tfrecord")).size(), 4u * 65536);
  for (const auto& [name, compression] :
       {std::pair<std::string, Compression>{"records.tfrecord", Compression::kNone},
        {"records.gzip.tfrecord", Compression::kGzip},
        {"records.zlib.tfrecord", Compression::kZlib}}) {
    SCOPED_TRACE(name);
    auto reader = RecordReader::Open(Path(name));
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->compression(), compression);
    auto detected = ReadAll(Path(name));
    ASSERT_TRUE(detected.ok()) << detected.status();
    EXPECT_EQ(*detected, *plain);
    auto configured = ReadAll(Path(name), compression);
    ASSERT_TRUE(configured.ok()) << configured.status();
    EXPECT_EQ(*configured, *plain);
  }
  // Told the wrong compression, the reader fails at the first record, it
  // does not guess.
  auto wrong = ReadAll(Path("records.gzip.tfrecord"), Compression::kNone);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("record 0 at byte 0: length CRC mismatch"));
  wrong = ReadAll(Path("records.tfrecord"), Compression::kGzip);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("record 0 at inflated byte 0: gzip stream corrupt after 2 compressed bytes: incorrect header check"));
}

TEST_F(CompressedRecordsTest, CorruptOrTruncatedGzipIsDataLossNamingFileAndCompressedOffset) {
  const std::string gz = Slurp(Path("records.gzip.tfrecord"));
  const std::string bad = TempPath("bad.gz.tfrecord");
  // Cut anywhere past the header: never a clean end, never a crash.
  for (size_t cut = 10; cut < gz.size(); cut += 4099) {
    Spit(bad, gz.substr(0, cut));
    auto recs = ReadAll(bad);
    ASSERT_FALSE(recs.ok()) << "cut at " << cut;
    EXPECT_EQ(recs.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(recs.status().message()), HasSubstr(bad + ": record "));
  }
  Spit(bad, gz.substr(0, 150000));
  EXPECT_THAT(std::string(ReadAll(bad).status().message()),
              HasSubstr("gzip stream corrupt after 150000 compressed bytes: truncated"));
  // A flipped bit inside the deflate data: zlib's own checks, the gzip
  // CRC-32 or the TFRecord CRCs catch it; any way, the file is named.
  for (size_t at = 100; at < gz.size() - 8; at += 7001) {
    std::string flipped = gz;
    flipped[at] ^= 0x04;
    Spit(bad, flipped);
    auto recs = ReadAll(bad);
    ASSERT_FALSE(recs.ok()) << "flip at " << at;
    EXPECT_EQ(recs.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(recs.status().message()), HasSubstr(bad + ": record "));
  }
  std::string bad_block = gz;
  bad_block[10] = '\x07';  // first block header: BTYPE 11, which deflate reserves
  Spit(bad, bad_block);
  EXPECT_THAT(std::string(ReadAll(bad).status().message()),
              HasSubstr(bad + ": record 0 at inflated byte 0: gzip stream corrupt after 11 compressed bytes: invalid block type"));
}

TEST_F(CompressedRecordsTest, ConcatenatedGzipMembersReadAsOneStreamButNotZlibTrailers) {
  const std::string plain = Slurp(Path("records.tfrecord"));
  const std::string two = TempPath("two_members.gz.tfrecord");
  // Split mid-record: the members' boundary is invisible to the framing.
  Spit(two, testing::Compress(plain.substr(0, 12345), true) +
                testing::Compress(plain.substr(12345), true));
  auto recs = ReadAll(two);
  ASSERT_TRUE(recs.ok()) << recs.status();
  EXPECT_EQ(recs->size(), 300u);

  const std::string trailing = TempPath("trailing.zlib.tfrecord");
  Spit(trailing, Slurp(Path("records.zlib.tfrecord")) + "junk");
  auto more = ReadAll(trailing);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(more.status().message()), HasSubstr("bytes after the end of the zlib stream"));
}

// In a compressed file the size of what is left is unknown: a forged
// length grows the record only as its bytes arrive, then fails.
TEST(RecordIoTest, AForgedLengthInAGzipStreamFailsWithoutAllocatingIt) {
  const std::string header = ForgedHeader(uint64_t{3} << 30);
  const std::string path = TempPath("huge_length.gz.tfrecord");
  Spit(path, testing::Compress(header + "abc", true));
  auto recs = ReadAll(path);
  EXPECT_EQ(recs.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(recs.status().message()),
              HasSubstr("record 0 at inflated byte 0: truncated data (expected 3221225472 bytes)"));
}

TEST(RecordIoTest, CompressionNamesAreTensorFlowsAndAnUnknownOneIsNamed) {
  EXPECT_EQ(*ParseCompression(""), Compression::kNone);
  EXPECT_EQ(*ParseCompression("NONE"), Compression::kNone);
  EXPECT_EQ(*ParseCompression("gzip"), Compression::kGzip);
  EXPECT_EQ(*ParseCompression("ZLIB"), Compression::kZlib);
  EXPECT_EQ(*ParseCompression("AUTO"), Compression::kAuto);
  auto lz4 = ParseCompression("LZ4");
  EXPECT_EQ(lz4.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(lz4.status().message()), HasSubstr("unknown compression \"LZ4\""));
}

}  // namespace
}  // namespace psrt
