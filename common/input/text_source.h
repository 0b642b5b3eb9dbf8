// Line-by-line reading over a list of text files, for CSV and libsvm.
#ifndef PSRT_COMMON_INPUT_TEXT_SOURCE_H_
#define PSRT_COMMON_INPUT_TEXT_SOURCE_H_

#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psrt {

class LineReader {
 public:
  explicit LineReader(std::vector<std::string> files) : files_(std::move(files)) {}

  absl::Status Reset();
  // The next non-empty line (trailing '\r' removed); false after the last.
  absl::StatusOr<bool> Next(std::string* line);
  // "file:line" of the last line returned, for errors.
  std::string Where() const;
  // An INVALID_ARGUMENT error at the last line returned.
  absl::Status Error(absl::string_view what) const;
  const std::string& file() const { return files_[file_index_]; }
  int64_t line_number() const { return line_; }

 private:
  const std::vector<std::string> files_;
  size_t file_index_ = 0;
  std::ifstream in_;
  bool open_ = false;
  int64_t line_ = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_TEXT_SOURCE_H_
