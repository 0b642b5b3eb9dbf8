// A zip archive of stored (uncompressed) entries, built in memory: what a
// .keras file is (Python's zipfile reads it; Keras writes its own stored
// too). No ZIP64: each entry and the whole archive stay under 4 GiB.
#ifndef PSRT_CHIEF_EXPORT_FORMATS_ZIP_WRITER_H_
#define PSRT_CHIEF_EXPORT_FORMATS_ZIP_WRITER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace psrt {

// The archive's bytes: `entries` (name, contents) in order, each with its
// CRC-32, dated 1980-01-01 00:00 so the same input gives the same bytes.
// INVALID_ARGUMENT for an empty, absolute, "..", or repeated name;
// RESOURCE_EXHAUSTED naming the entry that would need ZIP64.
absl::StatusOr<std::string> StoredZip(const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_ZIP_WRITER_H_
