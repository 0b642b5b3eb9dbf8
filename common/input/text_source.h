// Line-by-line reading over a list of text files, for CSV and libsvm. A
// line longer than max_line_bytes is refused (naming file, line and the
// bound) once that many bytes of it are read: a file of one 100 GB line
// costs no more than the bound.
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
  // `bound_name` says how to raise max_line_bytes, in errors.
  explicit LineReader(std::vector<std::string> files, uint64_t max_line_bytes = uint64_t{64} << 20,
                      std::string bound_name = "")
      : files_(std::move(files)), max_line_bytes_(max_line_bytes), bound_name_(std::move(bound_name)) {}

  absl::Status Reset();
  // The next non-empty line (trailing '\r' removed); false after the last.
  // RESOURCE_EXHAUSTED for a line longer than max_line_bytes.
  absl::StatusOr<bool> Next(std::string* line);
  // "file:line" of the last line returned, for errors.
  std::string Where() const;
  // An INVALID_ARGUMENT error at the last line returned.
  absl::Status Error(absl::string_view what) const;
  const std::string& file() const { return files_[file_index_]; }
  int64_t line_number() const { return line_; }

 private:
  // One line of in_ into *line, without its '\n'; false at the file's end.
  absl::StatusOr<bool> ReadLine(std::string* line);

  const std::vector<std::string> files_;
  const uint64_t max_line_bytes_;
  const std::string bound_name_;
  size_t file_index_ = 0;
  std::ifstream in_;
  bool open_ = false;
  int64_t line_ = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_TEXT_SOURCE_H_
