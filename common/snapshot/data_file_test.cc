#include "common/snapshot/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

std::string Path(const std::string& suffix) {
  return ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
}

// Page-aligned bytes (what BufferPool hands out), so large appends take the
// zero-copy direct path.
struct Aligned {
  explicit Aligned(size_t n) : p(static_cast<char*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))), n(n) {
    std::mt19937 rng(n);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(rng());
  }
  ~Aligned() { std::free(p); }
  char* p;
  size_t n;
};

std::string ReadAll(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0);
  std::string out(st.st_size, '\0');
  EXPECT_TRUE(ReadFully(fd, path, 0, st.st_size, out.data()).ok());
  ::close(fd);
  return out;
}

// Small, unaligned, aligned-and-large (with and without a partial last
// page) appends interleaved: every byte lands where Append said, and the
// file ends exactly after the last one, with direct I/O and without.
void WriteAndCheck(bool direct_io) {
  const std::string path = Path(direct_io ? ".direct" : ".buffered");
  DataFileOptions o;
  o.direct_io = direct_io;
  auto w = DataFileWriter::Create(path, o);
  ASSERT_TRUE(w.ok()) << w.status();
  Aligned big(3 << 20), odd((1 << 20) + 123), small(1000);
  std::vector<std::pair<const char*, int64_t>> appends = {
      {small.p, 1000}, {big.p, big.n},     {small.p + 1, 999},
      {odd.p, odd.n},  {odd.p + 1, 70000},  // large but unaligned: copied
      {big.p, big.n},  {small.p, 0}};
  std::vector<int64_t> offsets;
  for (const auto& [p, n] : appends) {
    auto off = (*w)->Append(p, n);
    ASSERT_TRUE(off.ok()) << off.status();
    offsets.push_back(*off);
  }
  ASSERT_TRUE((*w)->Finish().ok());
  const int64_t size = (*w)->size();
  w->reset();
  std::string file = ReadAll(path);
  ASSERT_EQ(static_cast<int64_t>(file.size()), size);
  for (size_t i = 0; i < appends.size(); ++i) {
    EXPECT_EQ(file.compare(offsets[i], appends[i].second, appends[i].first, appends[i].second), 0) << "append " << i;
  }
  EXPECT_EQ(offsets.back(), size);
  if (direct_io) {
    EXPECT_EQ(offsets[1] % 4096, 0);  // the aligned tensor starts on a page
  }
}

TEST(DataFileTest, BytesLandWhereAppendSaysWithDirectIo) { WriteAndCheck(true); }
TEST(DataFileTest, BytesLandWhereAppendSaysBuffered) { WriteAndCheck(false); }

TEST(DataFileTest, RefusesAnExistingFile) {
  const std::string path = Path("");
  ASSERT_TRUE(DataFileWriter::Create(path, {}).ok());
  auto again = DataFileWriter::Create(path, {});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
}

TEST(DataFileTest, ReadPastTheEndIsDataLossNamingFileAndOffset) {
  const std::string path = Path("");
  {
    auto w = DataFileWriter::Create(path, {});
    ASSERT_TRUE((*w)->Append("abcdef", 6).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  char buf[16];
  absl::Status s = ReadFully(fd, path, 2, 10, buf);
  ::close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), path + ": ends at offset 6, 6 bytes short");
}

}  // namespace
}  // namespace psrt
