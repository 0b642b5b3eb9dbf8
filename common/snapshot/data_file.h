// The tensor bytes of one snapshot: a plain file written once, front to
// back, in large writes (SNAPSHOT_FORMAT.md, "Data files"). The store's
// RocksDB keeps the index that says where each tensor lies and its CRC32C.
//
// DataFileWriter writes with O_DIRECT where the file system allows it: a
// tensor whose memory is page-aligned (BufferPool's are) goes from that
// memory to the disk with no copy, at a page-aligned offset; small or
// unaligned tensors are copied into an aligned staging buffer. Measured on
// this project's disk (tests/bench/CHECKPOINT_BENCH_RESULTS.md), buffered
// writes were erratic (0.15-1.1 x dd) and direct ones steady.
//
//   ASSIGN_OR_RETURN(auto w, DataFileWriter::Create(path, {}));
//   ASSIGN_OR_RETURN(int64_t offset, w->Append(t.raw_data(), t.TotalBytes()));
//   RETURN_IF_ERROR(w->Finish());  // synced: the bytes and the file's size
//
// Not thread-safe: one writer thread.
#ifndef PSRT_COMMON_SNAPSHOT_DATA_FILE_H_
#define PSRT_COMMON_SNAPSHOT_DATA_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace psrt {

struct DataFileOptions {
  // O_DIRECT where the file system takes it (a plain buffered write where
  // it does not, e.g. tmpfs).
  bool direct_io = true;
};

class DataFileWriter {
 public:
  // Creates `path`, which must not exist. UNAVAILABLE on an I/O error.
  static absl::StatusOr<std::unique_ptr<DataFileWriter>> Create(const std::string& path, DataFileOptions options);
  // Closes the file; a writer not Finish()ed leaves a partial file (the
  // caller removes it, or the store's sweep at its next Open does).
  ~DataFileWriter();

  // Appends n bytes; returns the offset they start at. `data` is only read
  // during the call. RESOURCE_EXHAUSTED on a full disk, UNAVAILABLE on
  // other I/O errors.
  absl::StatusOr<int64_t> Append(const void* data, int64_t n);
  // Writes what is staged, cuts the file to its logical size and
  // fdatasyncs it. The caller syncs the directory (a new name).
  absl::Status Finish();
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  DataFileWriter(std::string path, int fd, bool direct);
  absl::Status WriteAt(const char* data, int64_t n, int64_t offset);
  // Writes the staged bytes, zero-padded to a whole page (they start at a
  // page boundary, so the file stays aligned for the next direct write).
  absl::Status FlushStage();

  const std::string path_;
  const int fd_;
  bool direct_;  // cleared if the file system refuses a direct write
  char* stage_;  // page-aligned, kStageBytes
  int64_t staged_ = 0;
  int64_t size_ = 0;  // logical bytes appended; stage starts at size_ - staged_
};

// Fsyncs directory `dir`, so a file created or removed in it survives a
// power loss.
absl::Status SyncDir(const std::string& dir);

// Reads [offset, offset + n) of an open file into `out`; DATA_LOSS naming
// `path` and the offset if the file ends first.
absl::Status ReadFully(int fd, const std::string& path, int64_t offset, int64_t n, char* out);

}  // namespace psrt

#endif  // PSRT_COMMON_SNAPSHOT_DATA_FILE_H_
