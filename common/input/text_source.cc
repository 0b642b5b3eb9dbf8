#include "common/input/text_source.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {

absl::Status LineReader::Reset() {
  if (files_.empty()) return absl::InvalidArgumentError("no input files");
  for (const std::string& f : files_) {
    if (!std::ifstream(f)) return absl::NotFoundError(absl::StrCat("cannot open ", f));
  }
  in_.close();
  in_.clear();
  file_index_ = 0;
  line_ = 0;
  open_ = false;
  return absl::OkStatus();
}

absl::StatusOr<bool> LineReader::Next(std::string* line) {
  while (file_index_ < files_.size()) {
    if (!open_) {
      in_.close();
      in_.clear();
      in_.open(files_[file_index_]);
      if (!in_) return absl::NotFoundError(absl::StrCat("cannot open ", files_[file_index_]));
      open_ = true;
      line_ = 0;
    }
    while (true) {
      ASSIGN_OR_RETURN(bool read, ReadLine(line));
      if (!read) break;
      ++line_;
      if (!line->empty() && line->back() == '\r') line->pop_back();
      if (!line->empty()) return true;
    }
    if (in_.bad()) return absl::DataLossError(absl::StrCat("read error in ", files_[file_index_]));
    open_ = false;
    ++file_index_;
  }
  return false;
}

absl::StatusOr<bool> LineReader::ReadLine(std::string* line) {
  line->clear();
  std::streambuf* buf = in_.rdbuf();
  bool any = false;
  for (int c = buf->sbumpc(); c != std::char_traits<char>::eof(); c = buf->sbumpc()) {
    any = true;
    if (c == '\n') return true;
    if (line->size() >= max_line_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat(files_[file_index_], ":", line_ + 1, ": a line longer than the bound of ", max_line_bytes_,
                       " bytes", bound_name_.empty() ? "" : absl::StrCat(" (", bound_name_, ")"), ": not read"));
    }
    line->push_back(static_cast<char>(c));
  }
  return any;
}

std::string LineReader::Where() const {
  return absl::StrCat(files_[std::min(file_index_, files_.size() - 1)], ":", line_);
}

absl::Status LineReader::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(Where(), ": ", what));
}

}  // namespace psrt
