// For tests and fuzzers that damage a snapshot store on purpose: what a
// hostile or corrupt file says, with its checksums made valid again.
#ifndef PSRT_COMMON_SNAPSHOT_SNAPSHOT_TESTING_H_
#define PSRT_COMMON_SNAPSHOT_SNAPSHOT_TESTING_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/snapshot.pb.h"

namespace rocksdb {
class DB;
}

namespace psrt {
namespace testing {

// Puts `index` as `step`'s index of an open store database, with its
// checksum (what SnapshotStore::Write appends).
absl::Status PutSnapshotIndex(rocksdb::DB* db, int64_t step, const SnapshotIndex& index);

// Reads, changes and writes back `step`'s index in the store at `dir`,
// which no process may have open (the checksum is made valid again: the
// damage is in what it says).
absl::Status EditSnapshotIndex(const std::string& dir, int64_t step, const std::function<void(SnapshotIndex*)>& edit);

// The path of the data file `step`'s index names in the store at `dir`.
absl::StatusOr<std::string> SnapshotDataFile(const std::string& dir, int64_t step);

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_COMMON_SNAPSHOT_SNAPSHOT_TESTING_H_
