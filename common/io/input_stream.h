// Forward-only byte streams that RecordReader reads TFRecord frames from: a
// plain file, or a gzip or zlib (deflate) file inflated as it is read, so a
// compressed file never has to fit in memory (TensorFlow's
// TFRecordOptions(compression_type="GZIP" / "ZLIB") write these).
//
//   ASSIGN_OR_RETURN(auto file, FileInputStream::Open(path));
//   std::unique_ptr<InputStream> in = InflateInputStream(std::move(file), Compression::kGzip);
//   char buf[4096];
//   ASSIGN_OR_RETURN(size_t got, in->Read(buf, sizeof(buf)));  // < 4096 only at the end
//
// Read errors (a corrupt or truncated compressed stream, an I/O error) are
// DATA_LOSS and name how far into the file they are, not the file itself: the caller
// knows the path and the record. Not thread-safe.
#ifndef PSRT_COMMON_IO_INPUT_STREAM_H_
#define PSRT_COMMON_IO_INPUT_STREAM_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psrt {

// TensorFlow's compression_type names: "NONE" (also ""), "GZIP", "ZLIB";
// "AUTO" detects it from the file's first bytes (see RecordReader).
enum class Compression { kAuto, kNone, kGzip, kZlib };

// INVALID_ARGUMENT naming `name` and the accepted ones if it is none of them.
absl::StatusOr<Compression> ParseCompression(absl::string_view name);
absl::string_view CompressionName(Compression c);

class InputStream {
 public:
  virtual ~InputStream() = default;
  // Reads up to n bytes into buf; fewer only at the end of the stream.
  virtual absl::StatusOr<size_t> Read(char* buf, size_t n) = 0;
  // Bytes left before the end, when cheap to know (a regular plain file),
  // else -1. Lets a reader refuse a length past the end before allocating.
  virtual int64_t BytesLeft() const { return -1; }
};

// A file read through stdio, with bytes peeked at put back in front.
class FileInputStream : public InputStream {
 public:
  // NOT_FOUND naming the path if it cannot be opened.
  static absl::StatusOr<std::unique_ptr<FileInputStream>> Open(const std::string& path);
  ~FileInputStream() override;

  // Up to n first bytes of what Read would return next, without consuming
  // them (fewer at the end of the file).
  absl::StatusOr<std::string> Peek(size_t n);
  absl::StatusOr<size_t> Read(char* buf, size_t n) override;
  int64_t BytesLeft() const override;
  // Bytes consumed through Read so far.
  int64_t position() const { return position_; }

 private:
  explicit FileInputStream(FILE* file) : file_(file) {}
  absl::StatusOr<size_t> ReadFile(char* buf, size_t n);

  FILE* const file_;
  std::string peeked_;
  int64_t position_ = 0;
};

// Inflates `raw` (REQUIRES: compression is kGzip or kZlib). A gzip file of
// several members (as `cat a.gz b.gz` makes) is read as their concatenation.
std::unique_ptr<InputStream> InflateInputStream(std::unique_ptr<FileInputStream> raw,
                                                Compression compression);

}  // namespace psrt

#endif  // PSRT_COMMON_IO_INPUT_STREAM_H_
