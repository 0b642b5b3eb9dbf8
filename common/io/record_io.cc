#include "common/io/record_io.h"

#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "common/status_macros.h"

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

// What kAuto reads a file as, from its first (up to 12) bytes: see record_io.h.
Compression Detect(const std::string& head) {
  if (head.size() == 12 && crc32c::Unmask(GetLE32(head.data() + 8)) == crc32c::Value(head.data(), 8)) {
    return Compression::kNone;
  }
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(head[i]); };
  if (head.size() >= 2 && byte(0) == 0x1f && byte(1) == 0x8b) return Compression::kGzip;
  // RFC 1950: method 8 (deflate), a window of at most 32 KiB, a header
  // check that makes the first two bytes a multiple of 31.
  if (head.size() >= 2 && (byte(0) & 0x0f) == 8 && (byte(0) >> 4) <= 7 &&
      ((byte(0) << 8) | byte(1)) % 31 == 0) {
    return Compression::kZlib;
  }
  return Compression::kNone;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path,
                                                                 Compression compression) {
  RecordReaderOptions options;
  options.compression = compression;
  return Open(path, options);
}

absl::StatusOr<std::unique_ptr<RecordReader>> RecordReader::Open(const std::string& path,
                                                                 const RecordReaderOptions& options) {
  Compression compression = options.compression;
  absl::StatusOr<std::unique_ptr<FileInputStream>> file = FileInputStream::Open(path);
  if (!file.ok()) return file.status();
  const bool detect = compression == Compression::kAuto;
  if (detect) {
    absl::StatusOr<std::string> head = (*file)->Peek(12);
    if (!head.ok()) return absl::DataLossError(absl::StrCat(path, ": ", head.status().message()));
    compression = Detect(*head);
  }
  std::unique_ptr<InputStream> in;
  if (compression == Compression::kNone) {
    in = std::move(*file);
  } else {
    in = InflateInputStream(std::move(*file), compression);
  }
  return std::unique_ptr<RecordReader>(new RecordReader(path, std::move(in), compression, detect, options));
}

RecordReader::~RecordReader() = default;

absl::Status RecordReader::Corrupt(absl::string_view what) const {
  return absl::DataLossError(absl::StrCat(
      path_, ": record ", index_, " at ", compression_ == Compression::kNone ? "" : "inflated ",
      "byte ", offset_, ": ", what));
}

absl::StatusOr<size_t> RecordReader::ReadFully(char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    absl::StatusOr<size_t> more = in_->Read(out + got, n - got);
    if (!more.ok()) return Corrupt(more.status().message());
    if (*more == 0) break;
    got += *more;
  }
  return got;
}

absl::StatusOr<bool> RecordReader::Next(std::string* record) {
  char header[12];
  absl::StatusOr<size_t> got = ReadFully(header, sizeof(header));
  if (!got.ok()) return got.status();
  if (*got == 0) return false;
  if (*got != sizeof(header)) return Corrupt("truncated length header");
  uint64_t length = GetLE64(header);
  if (crc32c::Unmask(GetLE32(header + 8)) != crc32c::Value(header, 8)) {
    if (detected_ && index_ == 0 && compression_ == Compression::kNone) {
      return Corrupt("length CRC mismatch (not a TFRecord file, nor a gzip or zlib compressed one)");
    }
    return Corrupt("length CRC mismatch");
  }
  if (length > kMaxRecordBytes) return Corrupt(absl::StrCat("implausible length ", length));
  if (length > options_.max_record_bytes) {
    return Corrupt(absl::StrCat("a record of ", length, " bytes, more than the bound of ", options_.max_record_bytes,
                                options_.bound_name.empty() ? "" : absl::StrCat(" (", options_.bound_name, ")"),
                                ": not read"));
  }
  // A corrupt length whose CRC happens to match (or was forged) must not
  // cost `length` bytes of memory: in a regular file, refuse it when the
  // rest of the file is shorter; elsewhere (pipes, compressed streams, whose
  // size is unknown) the record grows only as its bytes arrive.
  const int64_t left = in_->BytesLeft();
  if (left >= 0 && length > static_cast<uint64_t>(left)) {
    return Corrupt(absl::StrCat("truncated data (expected ", length, " bytes, the file has ", left,
                                " left)"));
  }
  constexpr uint64_t kGrowth = 1 << 20;
  record->clear();
  while (record->size() < length) {
    const size_t had = record->size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(length - had, std::max<uint64_t>(had, kGrowth)));
    record->resize(had + want);
    ASSIGN_OR_RETURN(size_t more, ReadFully(record->data() + had, want));
    if (more != want) return Corrupt(absl::StrCat("truncated data (expected ", length, " bytes)"));
  }
  char footer[4];
  ASSIGN_OR_RETURN(size_t footer_got, ReadFully(footer, 4));
  if (footer_got != 4) return Corrupt("truncated data CRC");
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
