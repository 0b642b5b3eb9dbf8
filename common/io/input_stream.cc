#include "common/io/input_stream.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace psrt {

absl::StatusOr<Compression> ParseCompression(absl::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  if (upper == "AUTO") return Compression::kAuto;
  // TensorFlow's TFRecordOptions takes "" for no compression.
  if (upper.empty() || upper == "NONE") return Compression::kNone;
  if (upper == "GZIP") return Compression::kGzip;
  if (upper == "ZLIB") return Compression::kZlib;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compression \"", name, "\" (AUTO, NONE, GZIP or ZLIB)"));
}

absl::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kAuto: return "AUTO";
    case Compression::kNone: return "NONE";
    case Compression::kGzip: return "GZIP";
    case Compression::kZlib: return "ZLIB";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<FileInputStream>> FileInputStream::Open(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<FileInputStream>(new FileInputStream(f));
}

FileInputStream::~FileInputStream() { std::fclose(file_); }

absl::StatusOr<size_t> FileInputStream::ReadFile(char* buf, size_t n) {
  const size_t got = std::fread(buf, 1, n, file_);
  if (got < n && std::ferror(file_)) {
    return absl::DataLossError(absl::StrCat("read error at byte ", position_ + peeked_.size() + got,
                                            ": ", std::strerror(errno)));
  }
  return got;
}

absl::StatusOr<std::string> FileInputStream::Peek(size_t n) {
  if (peeked_.size() < n) {
    const size_t had = peeked_.size();
    peeked_.resize(n);
    absl::StatusOr<size_t> got = ReadFile(peeked_.data() + had, n - had);
    if (!got.ok()) {
      peeked_.resize(had);
      return got.status();
    }
    peeked_.resize(had + *got);
  }
  return peeked_.substr(0, n);
}

absl::StatusOr<size_t> FileInputStream::Read(char* buf, size_t n) {
  const size_t from_peeked = std::min(n, peeked_.size());
  std::memcpy(buf, peeked_.data(), from_peeked);
  peeked_.erase(0, from_peeked);
  size_t got = from_peeked;
  if (got < n) {
    absl::StatusOr<size_t> more = ReadFile(buf + got, n - got);
    if (!more.ok()) return more.status();
    got += *more;
  }
  position_ += got;
  return got;
}

int64_t FileInputStream::BytesLeft() const {
  struct stat st;
  const off_t here = ftello(file_);
  if (here < 0 || fstat(fileno(file_), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  return std::max<int64_t>(0, st.st_size - here) + static_cast<int64_t>(peeked_.size());
}

}  // namespace psrt
