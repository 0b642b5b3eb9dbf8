#include "chief/export_formats/tf_bundle_writer.h"

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "common/io/crc32c.h"
#include "gtest/gtest.h"
#include "leveldb/env.h"
#include "leveldb/iterator.h"
#include "leveldb/options.h"
#include "leveldb/table.h"

namespace psrt {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The index read back with LevelDB's own table reader: key -> value, in
// the order the table holds them.
std::vector<std::pair<std::string, std::string>> ReadIndex(const std::string& path) {
  leveldb::Env* env = leveldb::Env::Default();
  uint64_t size = 0;
  EXPECT_TRUE(env->GetFileSize(path, &size).ok());
  leveldb::RandomAccessFile* file = nullptr;
  EXPECT_TRUE(env->NewRandomAccessFile(path, &file).ok());
  leveldb::Table* table = nullptr;
  leveldb::Status s = leveldb::Table::Open(leveldb::Options(), file, size, &table);
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::vector<std::pair<std::string, std::string>> out;
  if (table != nullptr) {
    leveldb::ReadOptions ro;
    ro.verify_checksums = true;
    std::unique_ptr<leveldb::Iterator> it(table->NewIterator(ro));
    for (it->SeekToFirst(); it->Valid(); it->Next()) out.push_back({it->key().ToString(), it->value().ToString()});
    EXPECT_TRUE(it->status().ok());
  }
  delete table;
  delete file;
  return out;
}

TEST(TfBundleWriterTest, IndexIsSortedWithTheHeaderFirstAndEntriesPointAtCheckedBytes) {
  const std::string prefix = std::string(std::getenv("TEST_TMPDIR")) + "/bundle";
  TfBundleWriter w;
  Tensor b = Tensor::FromVector<float>({1.5f, -2.0f, 3.25f}, TensorShape({3}));
  Tensor a = Tensor::FromVector<float>({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, TensorShape({2, 3}));
  ASSERT_TRUE(w.AddFloat("z/bias", b).ok());  // added out of order on purpose
  ASSERT_TRUE(w.AddFloat("a/kernel", a).ok());
  ASSERT_TRUE(w.AddString("m/graph", "hello").ok());
  ASSERT_TRUE(w.Finish(prefix).ok());

  const std::string data = ReadAll(TfBundleWriter::DataPath(prefix));
  auto index = ReadIndex(TfBundleWriter::IndexPath(prefix));
  ASSERT_EQ(index.size(), 4u);
  EXPECT_EQ(index[0].first, "");
  tfckpt::BundleHeader header;
  ASSERT_TRUE(header.ParseFromString(index[0].second));
  EXPECT_EQ(header.num_shards(), 1);
  EXPECT_EQ(header.endianness(), tfckpt::BundleHeader::LITTLE);
  EXPECT_EQ(header.version().producer(), 1);
  EXPECT_EQ(index[1].first, "a/kernel");
  EXPECT_EQ(index[2].first, "m/graph");
  EXPECT_EQ(index[3].first, "z/bias");

  tfckpt::BundleEntry e;
  ASSERT_TRUE(e.ParseFromString(index[1].second));
  EXPECT_EQ(e.dtype(), kTfFloat);
  ASSERT_EQ(e.shape().dim_size(), 2);
  EXPECT_EQ(e.shape().dim(0).size(), 2);
  EXPECT_EQ(e.shape().dim(1).size(), 3);
  ASSERT_EQ(e.size(), 24);
  ASSERT_LE(e.offset() + e.size(), static_cast<int64_t>(data.size()));
  EXPECT_EQ(data.substr(e.offset(), e.size()), std::string(static_cast<const char*>(a.raw_data()), 24));
  // TensorFlow stores the masked CRC32C.
  EXPECT_EQ(e.crc32c(), crc32c::Mask(crc32c::Value(a.raw_data(), 24)));

  // A string: varint length, masked CRC of the length as a uint32, bytes.
  ASSERT_TRUE(e.ParseFromString(index[2].second));
  EXPECT_EQ(e.dtype(), kTfString);
  EXPECT_EQ(e.shape().dim_size(), 0);
  const std::string s = data.substr(e.offset(), e.size());
  ASSERT_EQ(s.size(), 1u + 4u + 5u);
  EXPECT_EQ(s[0], 5);
  const uint32_t len = 5;
  uint32_t length_crc = 0;
  std::memcpy(&length_crc, s.data() + 1, 4);
  EXPECT_EQ(length_crc, crc32c::Mask(crc32c::Value(&len, 4)));
  EXPECT_EQ(s.substr(5), "hello");
  uint32_t whole = crc32c::Extend(crc32c::Value(&len, 4), s.data() + 1, 4);
  EXPECT_EQ(e.crc32c(), crc32c::Mask(crc32c::Extend(whole, "hello", 5)));
}

TEST(TfBundleWriterTest, RefusesEmptyAndDuplicateKeysAndNonFloatTensors) {
  TfBundleWriter w;
  Tensor t = Tensor::FromVector<float>({1.0f}, TensorShape({1}));
  EXPECT_EQ(w.AddFloat("", t).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.AddFloat("x", t).ok());
  absl::Status dup = w.AddFloat("x", t);
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("duplicate checkpoint key x"), absl::string_view::npos) << dup;
  EXPECT_EQ(w.AddString("x", "y").code(), absl::StatusCode::kInvalidArgument);
  Tensor ids = Tensor::FromVector<int64_t>({1, 2}, TensorShape({2}));
  EXPECT_EQ(w.AddFloat("ids", ids).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TfBundleWriterTest, UnwritableDirectoryIsAnErrorNamingTheFile) {
  TfBundleWriter w;
  ASSERT_TRUE(w.AddFloat("x", Tensor::FromVector<float>({1.0f}, TensorShape({1}))).ok());
  absl::Status s = w.Finish("/nonexistent-dir/model");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/model"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace psrt
