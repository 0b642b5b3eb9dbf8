// The input files a job names, as the readers open them: each entry of
// DataSource.files is a file, a directory (its regular files, sorted) or a
// pattern whose last path component holds fnmatch wildcards (`*`, `?`,
// `[...]`), as in "data/train-*-of-00004.tfrecord.gz" (the matching regular
// files, sorted byte-wise). Names starting with '.' are left out of both.
// A relative entry stays relative (opened from the working directory, as a
// plain file name is).
//
// Every worker expands the same list the same way, so example i -> worker
// i mod N holds over the expanded list.
#ifndef PSRT_COMMON_INPUT_FILE_LIST_H_
#define PSRT_COMMON_INPUT_FILE_LIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

namespace psrt {

// At most this many files after expansion (each entry is bounded before
// its names are kept).
inline constexpr int kMaxInputFiles = 1 << 20;

// True where `entry` holds a wildcard in its last path component.
bool IsFilePattern(const std::string& entry);

// The split's files with every pattern and directory expanded, in the
// order the entries are listed. A plain entry that is not a directory is
// kept as it is (a missing file is the reader's "cannot open"). Errors
// (INVALID_ARGUMENT, NOT_FOUND) name `field` and the entry: a pattern that
// matches nothing, an empty directory, wildcards in a directory component,
// more than kMaxInputFiles files.
absl::StatusOr<std::vector<std::string>> ExpandFiles(const DataSource& split, const std::string& field);

// `split` with its files expanded (ExpandFiles), labels_file as it is.
absl::StatusOr<DataSource> ExpandSplit(const DataSource& split, const std::string& field);

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_FILE_LIST_H_
