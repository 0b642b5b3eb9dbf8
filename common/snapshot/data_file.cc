#include "common/snapshot/data_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

constexpr int64_t kPage = 4096;             // O_DIRECT's alignment of memory, offset and length
constexpr int64_t kStageBytes = 4 << 20;    // small tensors gathered into writes this large
constexpr int64_t kZeroCopyMin = 64 << 10;  // below this a copy costs less than a padded page

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kPage == 0; }
int64_t RoundUp(int64_t n) { return (n + kPage - 1) / kPage * kPage; }

absl::Status IoError(const std::string& what, const std::string& path, int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataFileWriter>> DataFileWriter::Create(const std::string& path,
                                                                       DataFileOptions options) {
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  int fd = -1;
  bool direct = false;
  if (options.direct_io) {
    fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    direct = fd >= 0;
    if (fd < 0 && errno != EINVAL) return IoError("cannot create", path, errno);
  }
  if (fd < 0) fd = ::open(path.c_str(), flags, 0644);  // tmpfs and friends refuse O_DIRECT
  if (fd < 0) return IoError("cannot create", path, errno);
  return std::unique_ptr<DataFileWriter>(new DataFileWriter(path, fd, direct));
}

DataFileWriter::DataFileWriter(std::string path, int fd, bool direct)
    : path_(std::move(path)),
      fd_(fd),
      direct_(direct),
      stage_(static_cast<char*>(std::aligned_alloc(kPage, kStageBytes))) {}

DataFileWriter::~DataFileWriter() {
  ::close(fd_);
  std::free(stage_);
}

absl::Status DataFileWriter::WriteAt(const char* data, int64_t n, int64_t offset) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, data, static_cast<size_t>(n), offset);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && direct_) {
      // The file system took O_DIRECT at open but not this write (an
      // alignment it wants larger than a page): go on buffered.
      int fl = ::fcntl(fd_, F_GETFL);
      if (fl < 0 || ::fcntl(fd_, F_SETFL, fl & ~O_DIRECT) < 0) return IoError("cannot write", path_, errno);
      direct_ = false;
      continue;
    }
    if (w < 0) return IoError("cannot write", path_, errno);
    if (w == 0) return IoError("cannot write", path_, ENOSPC);
    data += w;
    n -= w;
    offset += w;
  }
  return absl::OkStatus();
}

absl::Status DataFileWriter::FlushStage() {
  if (staged_ == 0) return absl::OkStatus();
  // Only the last write of a file may end mid-page (Append pads the stage
  // before a direct write), so the stage always starts on a page.
  const int64_t len = direct_ ? RoundUp(staged_) : staged_;
  std::memset(stage_ + staged_, 0, len - staged_);
  absl::Status s = WriteAt(stage_, len, size_ - staged_);
  staged_ = 0;
  return s;
}

absl::StatusOr<int64_t> DataFileWriter::Append(const void* data, int64_t n) {
  const char* p = static_cast<const char*>(data);
  if (n >= kZeroCopyMin && (!direct_ || Aligned(p))) {
    if (direct_ && staged_ % kPage != 0) {  // start the tensor on a page: zeros between
      const int64_t pad = kPage - staged_ % kPage;
      std::memset(stage_ + staged_, 0, pad);
      staged_ += pad;
      size_ += pad;
    }
    if (absl::Status s = FlushStage(); !s.ok()) return s;
    const int64_t offset = size_;
    const int64_t body = direct_ ? n / kPage * kPage : n;
    if (absl::Status s = WriteAt(p, body, offset); !s.ok()) return s;
    size_ += body;
    std::memcpy(stage_, p + body, n - body);  // less than a page
    staged_ = n - body;
    size_ += n - body;
    return offset;
  }
  const int64_t offset = size_;
  while (n > 0) {
    const int64_t take = std::min(n, kStageBytes - staged_);
    std::memcpy(stage_ + staged_, p, take);
    staged_ += take;
    size_ += take;
    p += take;
    n -= take;
    if (staged_ == kStageBytes) {
      if (absl::Status s = FlushStage(); !s.ok()) return s;
    }
  }
  return offset;
}

absl::Status DataFileWriter::Finish() {
  if (absl::Status s = FlushStage(); !s.ok()) return s;
  // The last direct write was padded to a page: cut the file to what was
  // appended, so its size is the index's and a shorter file is truncated.
  if (::ftruncate(fd_, size_) != 0) return IoError("cannot truncate", path_, errno);
  if (::fdatasync(fd_) != 0) return IoError("cannot sync", path_, errno);
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return IoError("cannot sync directory", dir, err);
  return absl::OkStatus();
}

absl::Status ReadFully(int fd, const std::string& path, int64_t offset, int64_t n, char* out) {
  while (n > 0) {
    ssize_t r = ::pread(fd, out, static_cast<size_t>(n), offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EIO) return absl::DataLossError(absl::StrCat(path, ": read error at offset ", offset));
    if (r < 0) return IoError("cannot read", path, errno);
    if (r == 0) {
      return absl::DataLossError(absl::StrCat(path, ": ends at offset ", offset, ", ", n, " bytes short"));
    }
    out += r;
    n -= r;
    offset += r;
  }
  return absl::OkStatus();
}

}  // namespace psrt
