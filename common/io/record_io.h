// TFRecord files: each record is
//   uint64 length, uint32 masked_crc32c(length), bytes data, uint32 masked_crc32c(data)
// little-endian, as TensorFlow and TensorBoard write them. TensorBoard event
// files use the same framing.
//
//   ASSIGN_OR_RETURN(auto reader, RecordReader::Open(path));
//   std::string record;
//   while (true) {
//     ASSIGN_OR_RETURN(bool more, reader->Next(&record));
//     if (!more) break;
//     ...
//   }
//
// Errors name the file and the record index and byte offset: a truncated
// record is DATA_LOSS, a CRC mismatch is DATA_LOSS. Not thread-safe.
//
// Files TensorFlow writes with compression_type="GZIP" or "ZLIB" are
// inflated as they are read (input_stream.h). Compression::kAuto (the
// default) tells them apart by their first bytes: a file whose first 12
// bytes are a TFRecord length with its CRC is plain (a gzip or zlib header
// matches that CRC with odds of 2^-32); else the gzip magic 1f 8b or a valid
// zlib header choose the inflater; else the file is read as plain and fails
// at its first header. In a compressed file, record offsets count inflated
// bytes and a corrupt stream names how many compressed bytes were read before it broke.
#ifndef PSRT_COMMON_IO_RECORD_IO_H_
#define PSRT_COMMON_IO_RECORD_IO_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/io/input_stream.h"

namespace psrt {

struct RecordReaderOptions {
  Compression compression = Compression::kAuto;
  // A record whose length header says more is DATA_LOSS naming the length
  // and this bound, before a byte of it is read or inflated (a 4 MB gzip
  // file can hold one 4 GiB record).
  uint64_t max_record_bytes = uint64_t{1} << 32;
  // How a user raises the bound, for that error ("input.max_record_mb").
  std::string bound_name;
};

class RecordReader {
 public:
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(
      const std::string& path, Compression compression = Compression::kAuto);
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(const std::string& path,
                                                            const RecordReaderOptions& options);
  ~RecordReader();

  // Reads the next record into *record. False at a clean end of file.
  absl::StatusOr<bool> Next(std::string* record);
  int64_t records_read() const { return index_; }
  // NONE, GZIP or ZLIB: what the file was read as (never kAuto).
  Compression compression() const { return compression_; }

 private:
  RecordReader(std::string path, std::unique_ptr<InputStream> in, Compression compression,
               bool detected, RecordReaderOptions options)
      : path_(std::move(path)), in_(std::move(in)), compression_(compression), detected_(detected),
        options_(std::move(options)) {}
  absl::Status Corrupt(absl::string_view what) const;
  // Reads exactly n bytes into *out (n = 0 allowed); false at a clean end.
  absl::StatusOr<size_t> ReadFully(char* out, size_t n);

  const std::string path_;
  const std::unique_ptr<InputStream> in_;
  const Compression compression_;
  const bool detected_;  // compression_ came from kAuto
  const RecordReaderOptions options_;
  int64_t index_ = 0;
  int64_t offset_ = 0;
};

class RecordWriter {
 public:
  // Truncates or creates `path`; append = true adds to its end.
  static absl::StatusOr<std::unique_ptr<RecordWriter>> Open(const std::string& path,
                                                            bool append = false);
  ~RecordWriter();

  absl::Status Write(absl::string_view record);
  // Pushes buffered records to the OS (and to disk with sync = true).
  absl::Status Flush(bool sync = false);

 private:
  RecordWriter(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}

  const std::string path_;
  FILE* const file_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_IO_RECORD_IO_H_
