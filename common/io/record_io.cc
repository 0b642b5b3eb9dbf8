#include "common/io/record_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"

namespace psrt {
namespace {

void PutLE32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutLE64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Records larger than this are refused as corrupt rather than allocated.
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 32;

}  // namespace

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<RecordReader>(new RecordReader(path, f));
}

RecordReader::~RecordReader() { std::fclose(file_); }

absl::Status RecordReader::Corrupt(absl::string_view what) const {
  return absl::DataLossError(
      absl::StrCat(path_, ": record ", index_, " at byte ", offset_, ": ", what));
}

absl::StatusOr<bool> RecordReader::Next(std::string* record) {
  char header[12];
  size_t got = std::fread(header, 1, sizeof(header), file_);
  if (got == 0 && std::feof(file_)) return false;
  if (got != sizeof(header)) return Corrupt("truncated length header");
  uint64_t length = GetLE64(header);
  if (crc32c::Unmask(GetLE32(header + 8)) != crc32c::Value(header, 8)) {
    return Corrupt("length CRC mismatch");
  }
  if (length > kMaxRecordBytes) return Corrupt(absl::StrCat("implausible length ", length));
  // A corrupt length whose CRC happens to match (or was forged) must not
  // cost `length` bytes of memory: in a regular file, refuse it when the
  // rest of the file is shorter. (Pipes keep the kMaxRecordBytes bound.)
  struct stat st;
  off_t here = ftello(file_);
  if (here >= 0 && fstat(fileno(file_), &st) == 0 && S_ISREG(st.st_mode) &&
      length > static_cast<uint64_t>(std::max<off_t>(0, st.st_size - here))) {
    return Corrupt(absl::StrCat("truncated data (expected ", length, " bytes, the file has ",
                                std::max<off_t>(0, st.st_size - here), " left)"));
  }
  record->resize(length);
  if (std::fread(record->data(), 1, length, file_) != length) {
    return Corrupt(absl::StrCat("truncated data (expected ", length, " bytes)"));
  }
  char footer[4];
  if (std::fread(footer, 1, 4, file_) != 4) return Corrupt("truncated data CRC");
  if (crc32c::Unmask(GetLE32(footer)) != crc32c::Value(record->data(), length)) {
    return Corrupt("data CRC mismatch");
  }
  offset_ += 12 + length + 4;
  ++index_;
  return true;
}

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Open(const std::string& path,
                                                                 bool append) {
  FILE* f = std::fopen(path.c_str(), append ? "ab" : "wb");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, " for writing: ", std::strerror(errno)));
  }
  return std::unique_ptr<RecordWriter>(new RecordWriter(path, f));
}

RecordWriter::~RecordWriter() { std::fclose(file_); }

absl::Status RecordWriter::Write(absl::string_view record) {
  char header[12];
  PutLE64(record.size(), header);
  PutLE32(crc32c::Mask(crc32c::Value(header, 8)), header + 8);
  char footer[4];
  PutLE32(crc32c::Mask(crc32c::Value(record.data(), record.size())), footer);
  if (std::fwrite(header, 1, 12, file_) != 12 ||
      std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fwrite(footer, 1, 4, file_) != 4) {
    return absl::DataLossError(absl::StrCat("write to ", path_, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RecordWriter::Flush(bool sync) {
  if (std::fflush(file_) != 0 || (sync && ::fsync(fileno(file_)) != 0)) {
    return absl::DataLossError(absl::StrCat("flush of ", path_, " failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace psrt
