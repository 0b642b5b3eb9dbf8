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
#ifndef PSRT_COMMON_IO_RECORD_IO_H_
#define PSRT_COMMON_IO_RECORD_IO_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psrt {

class RecordReader {
 public:
  static absl::StatusOr<std::unique_ptr<RecordReader>> Open(const std::string& path);
  ~RecordReader();

  // Reads the next record into *record. False at a clean end of file.
  absl::StatusOr<bool> Next(std::string* record);
  int64_t records_read() const { return index_; }

 private:
  RecordReader(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Corrupt(absl::string_view what) const;

  const std::string path_;
  FILE* const file_;
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
