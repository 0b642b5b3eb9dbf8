#include "common/input/file_list.h"

#include <dirent.h>
#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

bool HasWildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The regular files of `dir` whose names match `pattern` ("" matches every
// name), sorted, each prefixed by `prefix`; names starting with '.' left out.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir, const std::string& prefix,
                                                       const std::string& pattern, const std::string& what,
                                                       int64_t room) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat(what, ": cannot list directory ", dir, ": ", std::strerror(errno)));
  }
  std::vector<std::string> names;
  absl::Status status;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    if (!pattern.empty() && ::fnmatch(pattern.c_str(), name.c_str(), FNM_PERIOD) != 0) continue;
    const std::string path = prefix + name;
    if (!IsRegularFile(path)) continue;
    if (static_cast<int64_t>(names.size()) >= room) {
      status = absl::InvalidArgumentError(
          absl::StrCat(what, ": more than ", kMaxInputFiles, " input files in all"));
      break;
    }
    names.push_back(path);
  }
  ::closedir(d);
  RETURN_IF_ERROR(status);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

bool IsFilePattern(const std::string& entry) {
  const size_t slash = entry.rfind('/');
  return HasWildcard(slash == std::string::npos ? entry : entry.substr(slash + 1));
}

absl::StatusOr<std::vector<std::string>> ExpandFiles(const DataSource& split, const std::string& field) {
  std::vector<std::string> out;
  for (int i = 0; i < split.files_size(); ++i) {
    const std::string& entry = split.files(i);
    const std::string what = absl::StrCat(field, ".files[", i, "] \"", entry, "\"");
    const int64_t room = kMaxInputFiles - static_cast<int64_t>(out.size());
    std::vector<std::string> got;
    if (IsFilePattern(entry)) {
      const size_t slash = entry.rfind('/');
      const std::string prefix = slash == std::string::npos ? "" : entry.substr(0, slash + 1);
      if (HasWildcard(prefix)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": wildcards are taken in the file name only, not in its directories"));
      }
      const std::string dir = prefix.empty() ? "." : prefix;
      ASSIGN_OR_RETURN(got, ListDirectory(dir, prefix, entry.substr(prefix.size()), what, room));
      if (got.empty()) return absl::NotFoundError(absl::StrCat(what, ": the pattern matches no file"));
    } else if (IsDirectory(entry)) {
      const std::string prefix = entry.back() == '/' ? entry : entry + "/";
      ASSIGN_OR_RETURN(got, ListDirectory(entry, prefix, "", what, room));
      if (got.empty()) return absl::NotFoundError(absl::StrCat(what, ": the directory holds no file"));
    } else {
      if (room < 1) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": more than ", kMaxInputFiles, " input files in all"));
      }
      got.push_back(entry);
    }
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

absl::StatusOr<DataSource> ExpandSplit(const DataSource& split, const std::string& field) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandFiles(split, field));
  DataSource out = split;
  out.clear_files();
  for (std::string& f : files) out.add_files(std::move(f));
  return out;
}

}  // namespace psrt
