#include "common/snapshot/snapshot_testing.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/io/crc32c.h"
#include "rocksdb/db.h"

namespace psrt {
namespace testing {
namespace {

std::string IndexKey(int64_t step) { return absl::StrFormat("i/%020d", step); }

absl::StatusOr<SnapshotIndex> GetIndex(rocksdb::DB* db, const std::string& dir, int64_t step) {
  std::string v;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), IndexKey(step), &v);
  if (!s.ok()) return absl::NotFoundError(absl::StrCat(dir, ": index of step ", step, ": ", s.ToString()));
  SnapshotIndex index;
  if (v.size() < 4 || !index.ParseFromString(v.substr(0, v.size() - 4))) {
    return absl::DataLossError(absl::StrCat(dir, ": index of step ", step, " does not parse"));
  }
  return index;
}

}  // namespace

absl::Status PutSnapshotIndex(rocksdb::DB* db, int64_t step, const SnapshotIndex& index) {
  std::string v = index.SerializeAsString();
  uint32_t crc = crc32c::Mask(crc32c::Value(v.data(), v.size()));
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  rocksdb::WriteOptions synced;
  synced.sync = true;
  rocksdb::Status s = db->Put(synced, IndexKey(step), v);
  if (!s.ok()) return absl::UnavailableError(s.ToString());
  return absl::OkStatus();
}

absl::Status EditSnapshotIndex(const std::string& dir, int64_t step, const std::function<void(SnapshotIndex*)>& edit) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::Options(), dir, &raw);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat(dir, ": ", s.ToString()));
  std::unique_ptr<rocksdb::DB> db(raw);
  absl::StatusOr<SnapshotIndex> index = GetIndex(db.get(), dir, step);
  if (!index.ok()) return index.status();
  edit(&*index);
  return PutSnapshotIndex(db.get(), step, *index);
}

absl::StatusOr<std::string> SnapshotDataFile(const std::string& dir, int64_t step) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat(dir, ": ", s.ToString()));
  std::unique_ptr<rocksdb::DB> db(raw);
  absl::StatusOr<SnapshotIndex> index = GetIndex(db.get(), dir, step);
  if (!index.ok()) return index.status();
  if (index->data_file().empty()) return absl::NotFoundError(absl::StrCat(dir, ": step ", step, " has no data file"));
  return absl::StrCat(dir, "/", index->data_file());
}

}  // namespace testing
}  // namespace psrt
