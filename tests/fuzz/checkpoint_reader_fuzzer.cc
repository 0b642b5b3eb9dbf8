// Fuzzes the checkpoint readers' view of files (issue #28): a snapshot
// store's index (common/snapshot/snapshot_store.h, both formats) and the
// chief's manifest (common/checkpoint/checkpoint_manifest.h), as a hostile
// or corrupt checkpoint could hold them.
//
// Byte 0, bit 0 clear: the rest is a serialized SnapshotIndex, put as step
// 1's index of a store (its checksum added) beside old-format chunks under
// s/<1>/0/value/... (16 bytes: floats 1..4) and, if the index names a data
// file of the valid shape, that file: 64 bytes (floats 1..16) made as long
// as the index's data_bytes says (sparse; up to 2^41). Read(1) with a 64 MiB
// bound, then again checked against a job of w float32[1000] and h a hash
// table [?, 2]. Must hold: no crash; an error is one of the codes a reader
// expects; what reads is what every reader takes (float32 values, slots of
// the value's shape, int64 [rows] ids) within the bound, and a read checked
// against the job fits it.
//
// Bit 0 set: the rest is a manifest's bytes (bit 1 clear: its checksum
// added; set: as is), read as checkpoint-1.manifest. Must hold: a manifest
// that reads names only stores inside the directory.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/checkpoint/checkpoint_manifest.h"
#include "common/io/crc32c.h"
#include "common/snapshot/snapshot_store.h"
#include "common/snapshot/snapshot_testing.h"
#include "proto/snapshot.pb.h"
#include "rocksdb/db.h"
#include "tests/fuzz/fuzz_util.h"

using psrt::fuzz::Check;

namespace {

constexpr int64_t kMaxBytes = 64 << 20;

void RemoveDataFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".data") == 0) ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

bool Expected(absl::StatusCode code) {
  return code == absl::StatusCode::kOk || code == absl::StatusCode::kDataLoss ||
         code == absl::StatusCode::kNotFound || code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kFailedPrecondition;
}

void CheckRead(const absl::StatusOr<psrt::PsSnapshot>& snap) {
  Check(Expected(snap.status().code()), "a read failed with an unexpected code");
  if (!snap.ok()) return;
  int64_t bytes = 0;
  for (const psrt::VariableState& st : snap->variables) {
    Check(st.value.dtype() == psrt::DT_FLOAT, "a value read is not float32");
    bytes += st.value.TotalBytes();
    for (const psrt::Tensor& t : st.slots) {
      Check(t.dtype() == psrt::DT_FLOAT && t.shape() == st.value.shape(), "a slot read is not the value's shape");
      bytes += t.TotalBytes();
    }
    if (st.ids.NumElements() > 0) {
      Check(st.ids.dtype() == psrt::DT_INT64 && st.ids.shape().rank() == 1 && st.value.shape().rank() >= 1 &&
                st.ids.NumElements() == st.value.shape().dim(0),
            "ids read are not int64 [rows]");
    }
  }
  Check(bytes <= kMaxBytes, "a read went past its bound");
}

void FuzzIndex(const std::string& bytes) {
  static const std::string dir = psrt::fuzz::ScratchPath("store");
  static const bool created = [] {
    auto store = psrt::SnapshotStore::Open(dir);
    Check(store.ok(), "cannot create the scratch store");
    return true;
  }();
  (void)created;
  RemoveDataFiles(dir);
  {
    rocksdb::DB* raw = nullptr;
    Check(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok(), "cannot open the scratch store");
    std::unique_ptr<rocksdb::DB> db(raw);
    const float chunk[4] = {1, 2, 3, 4};
    Check(db->Put(rocksdb::WriteOptions(), "s/00000000000000000001/0/value/000000",
                  rocksdb::Slice(reinterpret_cast<const char*>(chunk), sizeof(chunk)))
              .ok(),
          "cannot put a chunk");
    psrt::SnapshotIndex index;
    if (index.ParseFromString(bytes)) {
      Check(psrt::testing::PutSnapshotIndex(db.get(), 1, index).ok(), "cannot put the index");
      const std::string& name = index.data_file();
      if (name.size() == 51 && name.rfind("snapshot-", 0) == 0 && name.find('/') == std::string::npos) {
        float data[16];
        for (int i = 0; i < 16; ++i) data[i] = static_cast<float>(i + 1);
        const std::string path = dir + "/" + name;
        psrt::fuzz::WriteFile(path, data, sizeof(data));
        if (index.data_bytes() >= 0 && index.data_bytes() <= (int64_t{1} << 41)) {
          Check(::truncate(path.c_str(), index.data_bytes()) == 0, "cannot size the data file");
        }
      }
    } else {
      // Not an index: the bytes as they are, with a valid checksum.
      std::string v = bytes;
      const uint32_t crc = psrt::crc32c::Mask(psrt::crc32c::Value(v.data(), v.size()));
      for (int i = 0; i < 4; ++i) v.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
      Check(db->Put(rocksdb::WriteOptions(), "i/00000000000000000001", v).ok(), "cannot put the bytes");
    }
  }
  auto store = psrt::SnapshotStore::OpenReadOnly(dir);
  Check(store.ok(), "cannot reopen the scratch store");
  psrt::SnapshotReadOptions bounded;
  bounded.max_bytes = kMaxBytes;
  CheckRead((*store)->Read(1, bounded));

  psrt::VariableDef w, h;
  w.set_name("w");
  w.mutable_shape()->add_dim(1000);
  h.set_name("h");
  h.set_kind(psrt::VariableDef::HASH_TABLE);
  h.mutable_shape()->add_dim(0);
  h.mutable_shape()->add_dim(2);
  psrt::SnapshotReadOptions job = bounded;
  job.check_variable = [&](const psrt::VariableDef& def, psrt::DataType dtype, const psrt::TensorShape& value) {
    if (def.name() == "w") return psrt::FitsVariable(w, def, dtype, value);
    if (def.name() == "h") return psrt::FitsVariable(h, def, dtype, value);
    return absl::FailedPreconditionError("not the job's");
  };
  absl::StatusOr<psrt::PsSnapshot> checked = (*store)->Read(1, job);
  CheckRead(checked);
  if (checked.ok()) {
    for (const psrt::VariableState& st : checked->variables) {
      Check(st.def.name() == "w" || st.def.name() == "h", "a variable not the job's was read");
      if (st.def.name() == "w" && st.def.kind() == psrt::VariableDef::DENSE) {
        Check(st.value.NumElements() <= 1000, "a piece larger than the job's variable was read");
      }
    }
  }
}

void FuzzManifest(const std::string& bytes, bool add_checksum) {
  static const std::string dir = psrt::fuzz::ScratchPath("manifests");
  ::mkdir(dir.c_str(), 0755);
  std::string v = bytes;
  if (add_checksum) {
    const uint32_t crc = psrt::crc32c::Mask(psrt::crc32c::Value(v.data(), v.size()));
    for (int i = 0; i < 4; ++i) v.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  }
  psrt::ManifestStore store(dir);
  psrt::fuzz::WriteFile(store.PathFor(1), v.data(), v.size());
  absl::StatusOr<psrt::CheckpointManifest> m = store.Read(1);
  Check(m.ok() || m.status().code() == absl::StatusCode::kDataLoss, "a manifest failed with an unexpected code");
  if (!m.ok()) return;
  for (const psrt::CheckpointManifest::Shard& shard : m->shard()) {
    Check(!shard.path().empty() && shard.path().find('/') == std::string::npos && shard.path() != "." &&
              shard.path() != "..",
          "a manifest that reads names a store outside its directory");
  }
  absl::StatusOr<psrt::CheckpointManifest> latest = store.LatestValid();
  Check(latest.ok() && latest->step() == 1, "a manifest that reads is not the latest valid one");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    FuzzManifest(rest, (data[0] & 2) == 0);
  } else {
    FuzzIndex(rest);
  }
  return 0;
}
