// InflateInputStream (input_stream.h): zlib's inflate over a file, a chunk
// of compressed bytes at a time.
#include <zlib.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/io/input_stream.h"

namespace psrt {
namespace {

constexpr size_t kChunk = 64 << 10;

class InflatingStream : public InputStream {
 public:
  InflatingStream(std::unique_ptr<FileInputStream> raw, Compression compression)
      : raw_(std::move(raw)), gzip_(compression == Compression::kGzip), in_(new char[kChunk]) {
    // 16 + MAX_WBITS: a gzip header and trailer; MAX_WBITS alone: zlib's,
    // as TensorFlow's ZlibCompressionOptions::GZIP() and DEFAULT() write.
    if (inflateInit2(&zs_, gzip_ ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
      error_ = absl::ResourceExhaustedError("cannot start zlib's inflate (out of memory)");
    } else {
      initialized_ = true;
    }
  }
  ~InflatingStream() override {
    if (initialized_) inflateEnd(&zs_);
  }

  absl::StatusOr<size_t> Read(char* buf, size_t n) override {
    if (!error_.ok()) return error_;
    size_t out = 0;
    while (out < n && !finished_) {
      if (zs_.avail_in == 0 && !raw_eof_) {
        if (absl::Status s = Refill(); !s.ok()) return Fail(s.message());
      }
      zs_.next_out = reinterpret_cast<Bytef*>(buf + out);
      const uInt want = static_cast<uInt>(std::min<size_t>(n - out, 1u << 30));
      zs_.avail_out = want;
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      out += want - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        if (zs_.avail_in == 0 && !raw_eof_) {
          if (absl::Status s = Refill(); !s.ok()) return Fail(s.message());
        }
        if (zs_.avail_in == 0) {
          finished_ = true;
        } else if (!gzip_) {
          return Fail("bytes after the end of the zlib stream");
        } else if (inflateReset(&zs_) != Z_OK) {
          return Fail("cannot restart inflate for the next gzip member");
        }
      } else if (rc == Z_BUF_ERROR && raw_eof_ && zs_.avail_in == 0) {
        return Fail("truncated (the file ends inside the compressed stream)");
      } else if (rc != Z_OK) {
        return Fail(zs_.msg != nullptr ? zs_.msg : absl::StrCat("inflate error ", rc));
      }
    }
    return out;
  }

 private:
  absl::Status Refill() {
    absl::StatusOr<size_t> got = raw_->Read(in_.get(), kChunk);
    if (!got.ok()) return got.status();
    raw_eof_ = *got < kChunk;
    zs_.next_in = reinterpret_cast<Bytef*>(in_.get());
    zs_.avail_in = static_cast<uInt>(*got);
    return absl::OkStatus();
  }

  // Errors stick: zlib's state after one is undefined. zlib consumes whole
  // bytes, so the fault lies in the last of the bytes counted.
  absl::Status Fail(absl::string_view what) {
    const int64_t consumed = raw_->position() - zs_.avail_in;
    error_ = absl::DataLossError(absl::StrCat(gzip_ ? "gzip" : "zlib", " stream corrupt after ", consumed,
                                              " compressed bytes: ", what));
    return error_;
  }

  const std::unique_ptr<FileInputStream> raw_;
  const bool gzip_;
  const std::unique_ptr<char[]> in_;
  z_stream zs_{};
  bool initialized_ = false;
  bool raw_eof_ = false;
  bool finished_ = false;
  absl::Status error_;
};

}  // namespace

std::unique_ptr<InputStream> InflateInputStream(std::unique_ptr<FileInputStream> raw,
                                                Compression compression) {
  return std::make_unique<InflatingStream>(std::move(raw), compression);
}

}  // namespace psrt
