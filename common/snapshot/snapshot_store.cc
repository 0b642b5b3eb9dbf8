#include "common/snapshot/snapshot_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/io/crc32c.h"
#include "common/snapshot/data_file.h"
#include "common/snapshot/delta_chain.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "proto/snapshot.pb.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace psrt {
namespace {

std::string StepKey(int64_t step) { return absl::StrFormat("%020d", step); }
std::string IndexKey(int64_t step) { return "i/" + StepKey(step); }
std::string DataPrefix(int64_t step) { return "s/" + StepKey(step) + "/"; }
std::string ChunkKey(const std::string& prefix, int chunk) { return absl::StrFormat("%s/%06d", prefix, chunk); }

// Tensors this large have their checksum computed while they are written.
constexpr int64_t kOverlapChecksumBytes = 1 << 20;

constexpr absl::string_view kDataPrefix = "snapshot-";
constexpr absl::string_view kDataSuffix = ".data";
// A fresh name at every write: a step written again (after a recovery)
// never overwrites the file its committed index still names.
std::string NewDataFileName(int64_t step) {
  thread_local absl::BitGen gen;  // names only need to differ
  return absl::StrFormat("%s%020d-%016x%s", kDataPrefix, step, absl::Uniform<uint64_t>(gen), kDataSuffix);
}
// Only names of that shape are read or removed: an index is hostile input
// and must not point outside the store's directory.
bool IsDataFileName(absl::string_view name) {
  return absl::StartsWith(name, kDataPrefix) && absl::EndsWith(name, kDataSuffix) &&
         name.find('/') == absl::string_view::npos && name.size() == kDataPrefix.size() + 20 + 1 + 16 + kDataSuffix.size();
}
int64_t StepOfDataFile(absl::string_view name) {
  int64_t step = -1;
  if (!absl::SimpleAtoi(name.substr(kDataPrefix.size(), 20), &step)) return -1;
  return step;
}

// This machine's memory: what no snapshot read may ask for more than.
int64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(pages) * page;
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat(what, ": not found"));
  if (s.IsCorruption()) return absl::DataLossError(absl::StrCat(what, ": ", s.ToString()));
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      std::string p = dir.substr(0, i);
      if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::UnavailableError(absl::StrCat("cannot create ", p, ": ", std::strerror(errno)));
      }
    }
  }
  return absl::OkStatus();
}

// The index of `step`, its checksum verified: NOT_FOUND without one,
// DATA_LOSS (naming the step) if it does not verify or parse.
absl::StatusOr<SnapshotIndex> ReadIndex(rocksdb::DB* db, const std::string& dir, int64_t step) {
  std::string bytes;
  rocksdb::Status rs = db->Get(rocksdb::ReadOptions(), IndexKey(step), &bytes);
  if (rs.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no complete snapshot of step ", step));
  }
  RETURN_IF_ERROR(FromRocks(rs, absl::StrCat(dir, ": index of step ", step)));
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(dir, ": snapshot of step ", step, ": ", what));
  };
  if (bytes.size() < 4) return corrupt("truncated index");
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(bytes[bytes.size() - 4 + i]);
  bytes.resize(bytes.size() - 4);
  if (crc32c::Unmask(stored) != crc32c::Value(bytes.data(), bytes.size())) return corrupt("index checksum mismatch");
  SnapshotIndex index;
  if (!index.ParseFromString(bytes)) return corrupt("unparsable index");
  if (!index.data_file().empty() && !IsDataFileName(index.data_file())) {
    return corrupt(absl::StrCat("the index names a data file \"", absl::CEscape(index.data_file().substr(0, 64)),
                                "\" of no valid shape"));
  }
  return index;
}

// Every step with an index, ascending; an error when the scan could not
// read them all (a damaged block of RocksDB's files ends the iteration
// early, and a partial list looks exactly like a store with fewer
// snapshots). `steps` gets what was read either way.
absl::Status ScanSteps(rocksdb::DB* db, const std::string& dir, std::vector<int64_t>* steps) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("i/"); it->Valid() && it->key().starts_with("i/"); it->Next()) {
    int64_t step;
    if (absl::SimpleAtoi(it->key().ToString().substr(2), &step)) steps->push_back(step);
  }
  return FromRocks(it->status(), absl::StrCat(dir, ": listing the snapshot indexes (", steps->size(),
                                              " read before the error)"));
}

// Removes the data files no index names: left by a write killed before its
// index, a prune killed between index and file, or a step written again.
// Only when every index was read and verified: an orphan costs disk space,
// a wrong deletion costs a checkpoint. So a store with any index that does
// not read (or whose listing fails) keeps every file; the damage surfaces
// on the Read that needs it, and Salvage sets the whole store aside.
void SweepOrphans(rocksdb::DB* db, const std::string& dir) {
  std::vector<int64_t> steps;
  if (absl::Status s = ScanSteps(db, dir, &steps); !s.ok()) {
    LOG(WARNING) << "not removing orphan data files: " << s.message();
    return;
  }
  std::set<std::string> named;
  for (int64_t step : steps) {
    absl::StatusOr<SnapshotIndex> index = ReadIndex(db, dir, step);
    if (!index.ok()) {
      LOG(WARNING) << "not removing orphan data files: " << index.status().message();
      return;
    }
    named.insert(index->data_file());
    // A delta's base is named by its own index too; counted here as well
    // so a base written again keeps the copy its delta was taken against.
    if (index->delta()) named.insert(index->base_data_file());
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> orphans;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (IsDataFileName(name) && !named.count(name)) orphans.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : orphans) {
    LOG(INFO) << "removing " << dir << "/" << name << ": no snapshot index names it";
    ::unlink((dir + "/" + name).c_str());
  }
}

}  // namespace

absl::Status FitsVariable(const VariableDef& job, const VariableDef& saved, DataType dtype, const TensorShape& value) {
  auto misfit = [&](absl::string_view why) {
    std::vector<int64_t> dims(job.shape().dim().begin(), job.shape().dim().end());
    return absl::FailedPreconditionError(absl::StrCat(
        "variable ", job.name(), ": the checkpoint holds ", DataTypeName(dtype), value.ToString(), " (",
        VariableDef::Kind_Name(saved.kind()), "), the job's variable is float32[", absl::StrJoin(dims, ","), "] (",
        VariableDef::Kind_Name(job.kind()), "): ", why, " (another model?)"));
  };
  if (saved.kind() != job.kind()) return misfit("another kind");
  if (dtype != DT_FLOAT) return misfit("another dtype");
  const auto& dims = job.shape().dim();
  if (job.kind() == VariableDef::HASH_TABLE) {
    if (value.rank() != 2 || dims.size() != 2 || value.dim(1) != dims[1]) return misfit("another row width");
    return absl::OkStatus();
  }
  if (dims.empty()) {
    if (value.num_elements() > 1) return misfit("more values than the variable has");
    return absl::OkStatus();
  }
  if (value.rank() != static_cast<int>(dims.size())) return misfit("another rank");
  for (int i = 1; i < value.rank(); ++i) {
    if (value.dim(i) != dims[i]) return misfit("another row width");
  }
  if (value.dim(0) > dims[0]) return misfit("more rows than the variable has");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(const std::string& dir,
                                                                   SnapshotStoreOptions options) {
  RETURN_IF_ERROR(MakeDirs(dir));
  rocksdb::Options o;
  o.create_if_missing = true;
  o.write_buffer_size = 64 << 20;
  o.max_write_buffer_number = 4;
  o.compression = rocksdb::kNoCompression;  // float bytes hardly compress
  rocksdb::DB* db = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(o, dir, &db), absl::StrCat("opening snapshot store ", dir)));
  // Only this process has the database open (RocksDB's LOCK), so no write
  // is under way: any data file without an index is an orphan.
  SweepOrphans(db, dir);
  return std::unique_ptr<SnapshotStore>(new SnapshotStore(dir, std::move(options), db, /*read_only=*/false));
}

// RocksDB writes its info LOG into the database directory even when opened
// read-only; an inspector must change no file there.
class SilentLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::OpenReadOnly(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("no snapshot store at ", dir));
  rocksdb::Options o;
  o.info_log = std::make_shared<SilentLogger>();
  rocksdb::DB* db = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(o, dir, &db),
                            absl::StrCat("opening snapshot store ", dir, " read-only")));
  return std::unique_ptr<SnapshotStore>(new SnapshotStore(dir, SnapshotStoreOptions(), db, /*read_only=*/true));
}

SnapshotStore::~SnapshotStore() {
  if (remover_.joinable()) remover_.join();
  delete db_;
}

absl::Status SnapshotStore::CheckSpace(const PsSnapshot& snap) const {
  int64_t need = 16 << 20;  // RocksDB's log, manifest and table overhead
  for (const VariableState& st : snap.variables) {
    // A page of padding at most before each tensor in the data file.
    need += st.value.TotalBytes() + 4096 + (st.ids.IsValid() ? st.ids.TotalBytes() + 4096 : 0);
    for (const Tensor& slot : st.slots) need += slot.TotalBytes() + 4096;
  }
  struct statvfs fs;
  if (::statvfs(dir_.c_str(), &fs) != 0) return absl::OkStatus();  // cannot tell: let RocksDB try
  const int64_t free_bytes = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  if (free_bytes >= need) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "snapshot of step ", snap.step, " not written: ", free_bytes >> 20, " MiB free in ", dir_, ", it needs about ",
      need >> 20, " MiB"));
}

absl::StatusOr<int64_t> SnapshotStore::Write(const PsSnapshot& snap) {
  if (read_only_) return absl::FailedPreconditionError(absl::StrCat(dir_, " is open read-only"));
  // Checked first, before RocksDB sees a full disk: Debian's RocksDB 7.8
  // aborts the process on an assertion when a write fails for want of space
  // (WritableFileWriter::AssertFalseAndGetStatusForPrevError), and a
  // daemon must not die of a full disk.
  if (remover_.joinable()) remover_.join();  // space freed by the last prune counts
  RETURN_IF_ERROR(CheckSpace(snap));
  SnapshotIndex index;
  index.set_step(snap.step);
  index.set_global_step(snap.global_step);
  index.set_sync_step(snap.sync_step);
  for (int64_t s : snap.worker_next_step) index.add_worker_next_step(s);
  index.set_unix_ms(absl::ToUnixMillis(absl::Now()));
  if (snap.delta) {
    // A delta names the very copy of its base it was taken against: a base
    // written again later (a retaken step) breaks the chain visibly.
    if (snap.base_step >= snap.step) {
      return absl::InvalidArgumentError(absl::StrCat("delta of step ", snap.step, " on a later step ", snap.base_step));
    }
    absl::StatusOr<SnapshotIndex> base = ReadIndex(db_, dir_, snap.base_step);
    if (!base.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("delta of step ", snap.step, " not written: its base: ",
                                                        base.status().message()));
    }
    index.set_delta(true);
    index.set_base_step(snap.base_step);
    index.set_base_data_file(base->data_file());
  }
  const std::string name = NewDataFileName(snap.step);
  const std::string path = absl::StrCat(dir_, "/", name);
  DataFileOptions file_options;
  file_options.direct_io = options_.direct_io;
  ASSIGN_OR_RETURN(std::unique_ptr<DataFileWriter> file, DataFileWriter::Create(path, file_options));
  // A write that fails leaves no file behind (one killed leaves an orphan
  // for the next Open's sweep).
  absl::Cleanup remove_file = [&file, &path] {
    file.reset();
    ::unlink(path.c_str());
  };
  int64_t chunks_written = 0;
  int64_t total = 0;
  const int64_t piece = std::max<int64_t>(1, options_.chunk_bytes);

  auto put_tensor = [&](const Tensor& t, const std::string& key, SnapshotTensor* meta) -> absl::Status {
    meta->set_key(key);
    meta->set_dtype(t.dtype());
    t.shape().ToProto(meta->mutable_shape());
    const char* data = static_cast<const char*>(t.raw_data());
    const int64_t bytes = t.TotalBytes();
    meta->set_bytes(bytes);
    // The checksum of a large tensor is computed while its bytes go to the
    // disk (a direct write leaves the CPU idle), not before.
    uint32_t crc = 0;
    std::thread checksum;
    if (bytes >= kOverlapChecksumBytes) {
      checksum = std::thread([&crc, data, bytes] { crc = crc32c::Value(data, bytes); });
    } else {
      crc = crc32c::Value(data, bytes);
    }
    absl::Cleanup join = [&checksum] {
      if (checksum.joinable()) checksum.join();
    };
    int chunk = 0;
    for (int64_t off = 0; off < bytes || chunk == 0; off += piece, ++chunk) {
      ASSIGN_OR_RETURN(int64_t at, file->Append(data + off, std::min<int64_t>(piece, bytes - off)));
      if (chunk == 0) meta->set_offset(at);
      ++chunks_written;
      if (options_.fault_pause_after_chunks > 0 && chunks_written == options_.fault_pause_after_chunks &&
          options_.on_fault_pause) {
        options_.on_fault_pause();
      }
      if (bytes == 0) break;
    }
    meta->set_chunks(chunk == 0 ? 1 : chunk);
    std::move(join).Invoke();
    meta->set_crc32c(crc);
    total += bytes;
    return absl::OkStatus();
  };

  for (size_t v = 0; v < snap.variables.size(); ++v) {
    const VariableState& st = snap.variables[v];
    SnapshotVariable* sv = index.add_variable();
    *sv->mutable_def() = st.def;
    sv->set_updates(st.updates);
    sv->set_delta(st.delta);
    std::string key = absl::StrCat(v);
    RETURN_IF_ERROR(put_tensor(st.value, key + "/value", sv->mutable_value()));
    for (size_t s = 0; s < st.slots.size(); ++s) {
      RETURN_IF_ERROR(put_tensor(st.slots[s], absl::StrCat(key, "/slot", s), sv->add_slot()));
    }
    if (st.ids.IsValid()) RETURN_IF_ERROR(put_tensor(st.ids, key + "/ids", sv->mutable_ids()));
  }
  index.set_bytes(total);
  // The file's bytes and size, then its name in the directory, are durable
  // before the index that makes the snapshot exist.
  RETURN_IF_ERROR(file->Finish());
  index.set_data_file(name);
  index.set_data_bytes(file->size());
  file.reset();
  RETURN_IF_ERROR(SyncDir(dir_));
  // The copy this write replaces, if the step was written before: its file
  // goes once the new index is committed.
  std::string replaced;
  if (absl::StatusOr<SnapshotIndex> old = ReadIndex(db_, dir_, snap.step); old.ok()) replaced = old->data_file();
  std::string bytes = index.SerializeAsString();
  uint32_t crc = crc32c::Mask(crc32c::Value(bytes.data(), bytes.size()));
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  rocksdb::WriteOptions synced;
  synced.sync = true;
  RETURN_IF_ERROR(FromRocks(db_->Put(synced, IndexKey(snap.step), bytes),
                            absl::StrCat("writing the index of step ", snap.step)));
  std::move(remove_file).Cancel();
  if (!replaced.empty() && replaced != name) ::unlink(absl::StrCat(dir_, "/", replaced).c_str());
  return total;
}

absl::StatusOr<PsSnapshot> SnapshotStore::Read(int64_t step, const SnapshotReadOptions& options) const {
  // The chain: `step`, its base, the base's base ... down to a full
  // snapshot, every link checked before any data is read.
  std::vector<int64_t> chain = {step};
  ASSIGN_OR_RETURN(SnapshotIndex index, ReadIndex(db_, dir_, step));
  while (index.delta()) {
    const int64_t at = chain.back();
    const int64_t base_step = index.base_step();
    auto broken = [&](absl::string_view what) {
      return absl::DataLossError(absl::StrCat(dir_, ": snapshot of step ", step, ": its chain of incremental snapshots is broken: step ", at,
                                              " is a delta on step ", base_step, ", ", what));
    };
    if (base_step >= at) return broken("not an earlier step");
    absl::StatusOr<SnapshotIndex> base = ReadIndex(db_, dir_, base_step);
    if (absl::IsNotFound(base.status())) return broken("whose snapshot is missing (pruned or lost)");
    if (!base.ok()) return broken(base.status().message());
    if (base->data_file() != index.base_data_file()) {
      return broken(absl::StrCat("written as ", absl::CEscape(index.base_data_file().substr(0, 64)),
                                 ", since written again as ", base->data_file()));
    }
    chain.push_back(base_step);
    index = *std::move(base);
  }
  ASSIGN_OR_RETURN(PsSnapshot snap, ReadOne(chain.back(), options));
  for (size_t i = chain.size() - 1; i-- > 0;) {
    ASSIGN_OR_RETURN(PsSnapshot delta, ReadOne(chain[i], options));
    ASSIGN_OR_RETURN(snap.variables, ApplyDelta(std::move(snap.variables), std::move(delta.variables),
                                                absl::StrCat(dir_, ": snapshot of step ", chain[i], " on step ", chain[i + 1])));
    snap.step = delta.step;
    snap.global_step = delta.global_step;
    snap.sync_step = delta.sync_step;
    snap.worker_next_step = std::move(delta.worker_next_step);
  }
  snap.delta = false;
  snap.base_step = 0;
  return snap;
}

absl::StatusOr<PsSnapshot> SnapshotStore::ReadOne(int64_t step, const SnapshotReadOptions& options) const {
  ASSIGN_OR_RETURN(SnapshotIndex index, ReadIndex(db_, dir_, step));
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(dir_, ": snapshot of step ", step, ": ", what));
  };
  // The data file, for snapshots of the current format; -1 for the old one.
  int fd = -1;
  const std::string path = index.data_file().empty() ? "" : absl::StrCat(dir_, "/", index.data_file());
  absl::Cleanup close_file = [&fd] {
    if (fd >= 0) ::close(fd);
  };
  int64_t file_bytes = 0;
  if (!path.empty()) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return corrupt(absl::StrCat(path, ": missing"));
    if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    struct stat st;
    if (::fstat(fd, &st) != 0) return absl::UnavailableError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
    file_bytes = st.st_size;
    if (file_bytes != index.data_bytes()) {
      return corrupt(absl::StrCat(path, ": ", file_bytes, " bytes, the index says ", index.data_bytes(),
                                  file_bytes < index.data_bytes() ? " (truncated at offset " : " (grown at offset ",
                                  std::min(file_bytes, index.data_bytes()), ")"));
    }
  }

  // Bytes of an old-format tensor: its chunks in RocksDB.
  auto get_chunks = [&](const SnapshotTensor& meta, char* out) -> absl::Status {
    int64_t off = 0;
    std::string chunk;
    for (int c = 0; c < meta.chunks(); ++c) {
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), ChunkKey(meta.key(), c), &chunk);
      if (!s.ok()) return corrupt(absl::StrCat(ChunkKey(meta.key(), c), ": ", s.ToString()));
      if (off + static_cast<int64_t>(chunk.size()) > meta.bytes()) return corrupt(absl::StrCat(meta.key(), ": too long"));
      std::memcpy(out + off, chunk.data(), chunk.size());
      off += chunk.size();
    }
    if (off != meta.bytes()) return corrupt(absl::StrCat(meta.key(), ": truncated"));
    if (crc32c::Value(out, off) != meta.crc32c()) return corrupt(absl::StrCat(meta.key(), ": checksum mismatch"));
    return absl::OkStatus();
  };
  // Bytes of a tensor in the data file.
  auto get_range = [&](const SnapshotTensor& meta, char* out) -> absl::Status {
    const std::string where = absl::StrCat(path, ": ", meta.key(), " at offset ", meta.offset());
    absl::Status s = ReadFully(fd, path, meta.offset(), meta.bytes(), out);
    if (!s.ok()) return s.code() == absl::StatusCode::kDataLoss ? corrupt(s.message()) : s;
    if (crc32c::Value(out, meta.bytes()) != meta.crc32c()) return corrupt(absl::StrCat(where, ": checksum mismatch"));
    return absl::OkStatus();
  };
  // Bytes the old format's chunks of `meta` hold, counted without
  // copying them: checked before the tensor is allocated.
  auto chunk_bytes = [&](const SnapshotTensor& meta) -> absl::StatusOr<int64_t> {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    int64_t total = 0;
    int c = 0;
    for (it->Seek(ChunkKey(meta.key(), 0)); it->Valid() && c < meta.chunks(); it->Next(), ++c) {
      if (it->key().ToString() != ChunkKey(meta.key(), c)) break;
      total += static_cast<int64_t>(it->value().size());
      if (total > meta.bytes()) break;
    }
    RETURN_IF_ERROR(FromRocks(it->status(), absl::StrCat(dir_, ": chunks of ", meta.key())));
    return total;
  };
  // The checks of one tensor's entry against the file, before anything is
  // allocated; its shape on success.
  auto check_tensor = [&](const SnapshotTensor& meta, absl::string_view what) -> absl::StatusOr<TensorShape> {
    absl::StatusOr<TensorShape> shape = TensorShape::FromProto(meta.shape());
    if (!shape.ok()) return corrupt(absl::StrCat(meta.key(), ": ", shape.status().message()));
    const int64_t size = DataTypeSize(meta.dtype());
    if (size == 0) return corrupt(absl::StrCat(meta.key(), ": bad dtype"));
    if (shape->num_elements() > std::numeric_limits<int64_t>::max() / size ||
        shape->num_elements() * size != meta.bytes()) {
      return corrupt(absl::StrCat(meta.key(), ": size mismatch"));
    }
    if (what == "ids" ? meta.dtype() != DT_INT64 || shape->rank() != 1 : meta.dtype() != DT_FLOAT) {
      return corrupt(absl::StrCat(meta.key(), ": ", DataTypeName(meta.dtype()), shape->ToString(), " as its ", what,
                                  what == "ids" ? " (ids are int64 [rows])" : " (values and slots are float32)"));
    }
    if (!path.empty() &&
        (meta.offset() < 0 || meta.offset() > file_bytes || meta.bytes() > file_bytes - meta.offset())) {
      return corrupt(absl::StrCat(path, ": ", meta.key(), " at offset ", meta.offset(), ", ", meta.bytes(),
                                  " bytes: past the end of the file (", file_bytes, " bytes)"));
    }
    if (path.empty()) {
      if (meta.chunks() < 1) return corrupt(absl::StrCat(meta.key(), ": ", meta.chunks(), " chunks"));
      ASSIGN_OR_RETURN(int64_t held, chunk_bytes(meta));
      if (held != meta.bytes()) {
        return corrupt(absl::StrCat(meta.key(), ": its chunks hold ", held > meta.bytes() ? "more than " : "", held,
                                    " bytes, the index says ", meta.bytes()));
      }
    }
    return *std::move(shape);
  };
  // Every entry checked and the bytes added up before the first
  // allocation: an index can name any size, and a sparse file can be as
  // large as it says.
  int64_t total_bytes = 0;
  const int64_t limit = options.max_bytes > 0 ? options.max_bytes : PhysicalMemoryBytes();
  // Each tensor is at most the file's size, or what its chunks hold (checked
  // first), and the total is checked after each: no overflow.
  auto add = [&](const SnapshotTensor& meta) -> absl::Status {
    total_bytes += meta.bytes();
    if (!path.empty() && total_bytes > file_bytes) {
      return corrupt(absl::StrCat(path, ": the index names more bytes of tensors than the file's ", file_bytes,
                                  " (", meta.key(), " and those before it: ", total_bytes, ")"));
    }
    if (total_bytes > limit) {
      return absl::ResourceExhaustedError(absl::StrCat(
          dir_, ": snapshot of step ", step, ": its tensors need more than ", limit, " bytes (", meta.key(),
          " and those before it: ", total_bytes, "), more than ",
          options.max_bytes > 0 ? "this reader's bound" : "this machine's memory", ": not read"));
    }
    return absl::OkStatus();
  };
  for (const SnapshotVariable& sv : index.variable()) {
    ASSIGN_OR_RETURN(TensorShape value, check_tensor(sv.value(), "value"));
    for (const SnapshotTensor& slot : sv.slot()) {
      ASSIGN_OR_RETURN(TensorShape shape, check_tensor(slot, "slot"));
      if (shape != value) {
        return corrupt(absl::StrCat(slot.key(), ": a slot of ", shape.ToString(), " for a value of ", value.ToString()));
      }
    }
    if (sv.has_ids()) {
      ASSIGN_OR_RETURN(TensorShape ids, check_tensor(sv.ids(), "ids"));
      if (value.rank() < 1 || ids.dim(0) != value.dim(0)) {
        return corrupt(absl::StrCat(sv.ids().key(), ": ", ids.dim(0), " ids for a value of ", value.ToString()));
      }
    }
    if (options.check_variable) {
      absl::Status s = options.check_variable(sv.def(), sv.value().dtype(), value);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat(dir_, ": snapshot of step ", step, ": ", s.message()));
    }
    RETURN_IF_ERROR(add(sv.value()));
    for (const SnapshotTensor& slot : sv.slot()) RETURN_IF_ERROR(add(slot));
    if (sv.has_ids()) RETURN_IF_ERROR(add(sv.ids()));
  }
  auto get_tensor = [&](const SnapshotTensor& meta) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(TensorShape shape, TensorShape::FromProto(meta.shape()));
    absl::StatusOr<Tensor> allocated = Tensor::TryAllocate(meta.dtype(), shape);
    if (!allocated.ok()) {
      return absl::Status(allocated.status().code(), absl::StrCat(dir_, ": snapshot of step ", step, ": ", meta.key(),
                                                                  ": ", allocated.status().message()));
    }
    Tensor t = *std::move(allocated);
    char* out = static_cast<char*>(t.raw_data());
    RETURN_IF_ERROR(path.empty() ? get_chunks(meta, out) : get_range(meta, out));
    return t;
  };

  PsSnapshot snap;
  snap.step = index.step();
  snap.global_step = index.global_step();
  snap.sync_step = index.sync_step();
  snap.worker_next_step.assign(index.worker_next_step().begin(), index.worker_next_step().end());
  snap.delta = index.delta();
  snap.base_step = index.base_step();
  for (const SnapshotVariable& sv : index.variable()) {
    VariableState st;
    st.def = sv.def();
    st.updates = sv.updates();
    st.delta = sv.delta();
    ASSIGN_OR_RETURN(st.value, get_tensor(sv.value()));
    for (const SnapshotTensor& slot : sv.slot()) {
      ASSIGN_OR_RETURN(Tensor t, get_tensor(slot));
      st.slots.push_back(std::move(t));
    }
    if (sv.has_ids()) {
      ASSIGN_OR_RETURN(st.ids, get_tensor(sv.ids()));
    }
    snap.variables.push_back(std::move(st));
  }
  return snap;
}

std::vector<int64_t> SnapshotStore::Steps() const {
  std::vector<int64_t> steps;
  if (absl::Status s = ScanSteps(db_, dir_, &steps); !s.ok()) LOG(WARNING) << s.message();
  return steps;  // what the scan read, for callers that only look
}

absl::StatusOr<std::vector<int64_t>> SnapshotStore::ListSteps() const {
  std::vector<int64_t> steps;
  RETURN_IF_ERROR(ScanSteps(db_, dir_, &steps));
  return steps;
}

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Salvage(std::unique_ptr<SnapshotStore> corrupt,
                                                                      std::string* report) {
  const std::string dir = corrupt->dir();
  const SnapshotStoreOptions options = corrupt->options_;
  std::vector<PsSnapshot> kept;
  std::vector<std::string> lost;
  for (int64_t step : corrupt->Steps()) {
    absl::StatusOr<PsSnapshot> s = corrupt->Read(step);
    if (s.ok()) {
      kept.push_back(*std::move(s));
    } else {
      lost.push_back(absl::StrCat(step, " (", s.status().message(), ")"));
    }
  }
  corrupt.reset();  // closes the database before its directory moves
  const std::string aside = absl::StrCat(dir, ".corrupt-", absl::ToUnixMillis(absl::Now()));
  if (::rename(dir.c_str(), aside.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot move the corrupt snapshot store ", dir, " aside: ",
                                               std::strerror(errno)));
  }
  SnapshotStoreOptions fresh_options = options;
  fresh_options.fault_pause_after_chunks = 0;
  ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> fresh, Open(dir, fresh_options));
  std::vector<int64_t> kept_steps;
  for (const PsSnapshot& s : kept) {
    RETURN_IF_ERROR(fresh->Write(s).status());
    kept_steps.push_back(s.step);
  }
  *report = absl::StrCat("snapshot store ", dir, " was corrupt: moved to ", aside, "; kept steps [",
                         absl::StrJoin(kept_steps, ", "), "], lost [", absl::StrJoin(lost, ", "), "]");
  return fresh;
}

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Reopen(std::unique_ptr<SnapshotStore> store) {
  const std::string dir = store->dir();
  const SnapshotStoreOptions options = store->options_;
  store.reset();
  return Open(dir, options);
}

absl::Status SnapshotStore::Prune(int keep, int64_t protect) {
  if (read_only_) return absl::FailedPreconditionError(absl::StrCat(dir_, " is open read-only"));
  // Pruning from a partial listing would count the wrong snapshots as
  // the newest and could delete the base a hidden delta chains through.
  ASSIGN_OR_RETURN(const std::vector<int64_t> all, ListSteps());
  std::vector<int64_t> steps = all;
  // The step just written stays whatever its number: after a rollback the
  // store may hold higher-numbered snapshots of an abandoned run, and
  // pruning the new one at once left a wait for it hanging.
  steps.erase(std::remove(steps.begin(), steps.end(), protect), steps.end());
  if (protect >= 0) keep = std::max(0, keep - 1);
  std::vector<int64_t> retain(steps.end() - std::min<size_t>(std::max(0, keep), steps.size()), steps.end());
  return PruneKeeping(all, retain, protect);
}

absl::Status SnapshotStore::PruneTo(const std::vector<int64_t>& retain, int64_t protect) {
  if (read_only_) return absl::FailedPreconditionError(absl::StrCat(dir_, " is open read-only"));
  ASSIGN_OR_RETURN(const std::vector<int64_t> all, ListSteps());
  return PruneKeeping(all, retain, protect);
}

absl::Status SnapshotStore::PruneKeeping(const std::vector<int64_t>& all, const std::vector<int64_t>& retain,
                                         int64_t protect) {
  std::set<int64_t> kept;
  for (int64_t step : retain) {
    if (std::count(all.begin(), all.end(), step)) kept.insert(step);
  }
  if (protect >= 0 && std::count(all.begin(), all.end(), protect)) kept.insert(protect);
  const std::vector<int64_t>& steps = all;
  // A kept delta needs every snapshot of its chain down to a full one.
  for (std::vector<int64_t> todo(kept.begin(), kept.end()); !todo.empty();) {
    const int64_t at = todo.back();
    todo.pop_back();
    absl::StatusOr<SnapshotIndex> index = ReadIndex(db_, dir_, at);
    if (index.ok() && index->delta() && index->base_step() < at && kept.insert(index->base_step()).second) {
      todo.push_back(index->base_step());
    }
  }
  rocksdb::WriteOptions synced;
  synced.sync = true;
  if (remover_.joinable()) remover_.join();
  std::vector<std::string> unlink;
  // Started on every path out, once the indexes are gone.
  absl::Cleanup remove_files = [this, &unlink] {
    if (unlink.empty()) return;
    remover_ = std::thread([files = std::move(unlink)] {
      for (const std::string& f : files) ::unlink(f.c_str());
    });
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    if (kept.count(steps[i])) continue;
    // The index goes first: a crash mid-prune leaves data without an index
    // (swept at the next Open), never an index without its data.
    absl::StatusOr<SnapshotIndex> index = ReadIndex(db_, dir_, steps[i]);
    RETURN_IF_ERROR(FromRocks(db_->Delete(synced, IndexKey(steps[i])), "pruning an index"));
    if (index.ok() && !index->data_file().empty()) {
      unlink.push_back(absl::StrCat(dir_, "/", index->data_file()));
      continue;
    }
    // The old format's chunks.
    std::string begin = DataPrefix(steps[i]);
    std::string end = begin.substr(0, begin.size() - 1) + "0";  // '/' + 1
    RETURN_IF_ERROR(FromRocks(db_->DeleteRange(rocksdb::WriteOptions(), db_->DefaultColumnFamily(), begin, end),
                              "pruning data"));
  }
  return absl::OkStatus();
}

}  // namespace psrt
