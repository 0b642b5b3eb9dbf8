#include "common/checkpoint/checkpoint_manifest.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "glog/logging.h"

namespace psrt {
namespace {

constexpr char kPrefix[] = "checkpoint-";
constexpr char kSuffix[] = ".manifest";

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status MakeDirs(const std::string& dir) {
  std::string partial;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      partial = dir.substr(0, i);
      if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir", partial);
    }
  }
  return absl::OkStatus();
}

absl::Status WriteAllAndSync(const std::string& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno("cannot create", path);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return Errno("cannot write", path);
    }
    done += n;
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return Errno("cannot fsync", path);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return Errno("cannot open", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("cannot fsync", dir);
}

}  // namespace

std::string ManifestStore::PathFor(int64_t step) const {
  return absl::StrCat(dir_, "/", kPrefix, step, kSuffix);
}

// The file format of manifests and the job state: the serialized message,
// then its masked CRC32C, written to a temporary name, fsynced, renamed
// into place and the directory fsynced.
absl::Status ManifestStore::WriteChecked(const std::string& path, const google::protobuf::Message& m) {
  if (absl::Status s = MakeDirs(dir_); !s.ok()) return s;
  std::string bytes = m.SerializeAsString();
  uint32_t crc = crc32c::Mask(crc32c::Value(bytes.data(), bytes.size()));
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  std::string tmp = path + ".tmp";
  if (absl::Status s = WriteAllAndSync(tmp, bytes); !s.ok()) return s;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot rename to", path);
  return SyncDir(dir_);
}

absl::Status CheckStoreName(absl::string_view name) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("store path \"", absl::CEscape(name.substr(0, 64)), "\" ", why,
                                                   ": a store is a name inside the checkpoint directory"));
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > 255) return bad(absl::StrCat("has ", name.size(), " characters"));
  if (name == "." || name == "..") return bad("leaves the checkpoint directory");
  for (char ch : name) {
    if (ch == '/') return bad("leaves the checkpoint directory");
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-') {
      return bad(absl::StrCat("has character 0x", absl::Hex(static_cast<unsigned char>(ch), absl::kZeroPad2)));
    }
  }
  return absl::OkStatus();
}

absl::Status ManifestStore::ReadChecked(const std::string& path, absl::string_view kind,
                                        google::protobuf::Message* m) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no file ", path));
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && st.st_size > kMaxManifestBytes) {
    return absl::DataLossError(absl::StrCat(path, ": ", st.st_size, " bytes, more than the ", kMaxManifestBytes,
                                            " a ", kind, " may have"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  if (bytes.size() < 4) return absl::DataLossError(absl::StrCat(path, ": truncated ", kind));
  uint32_t stored = 0;
  for (int i = 3; i >= 0; --i) stored = (stored << 8) | static_cast<uint8_t>(bytes[bytes.size() - 4 + i]);
  bytes.resize(bytes.size() - 4);
  if (crc32c::Unmask(stored) != crc32c::Value(bytes.data(), bytes.size())) {
    return absl::DataLossError(absl::StrCat(path, ": ", kind, " checksum mismatch (corrupt)"));
  }
  if (!m->ParseFromString(bytes)) return absl::DataLossError(absl::StrCat(path, ": unparsable ", kind));
  return absl::OkStatus();
}

absl::Status ManifestStore::Commit(const CheckpointManifest& manifest) {
  return WriteChecked(PathFor(manifest.step()), manifest);
}

absl::StatusOr<ChiefJobState> ManifestStore::ReadJobState() const {
  ChiefJobState state;
  absl::Status s = ReadChecked(absl::StrCat(dir_, "/job_state"), "job state", &state);
  if (s.code() == absl::StatusCode::kNotFound) return ChiefJobState();
  if (!s.ok()) return s;
  return state;
}

absl::Status ManifestStore::WriteJobState(const ChiefJobState& state) {
  return WriteChecked(absl::StrCat(dir_, "/job_state"), state);
}

absl::StatusOr<CheckpointManifest> ManifestStore::Read(int64_t step) const {
  std::string path = PathFor(step);
  CheckpointManifest m;
  absl::Status s = ReadChecked(path, "manifest", &m);
  if (s.code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat("no committed checkpoint at step ", step, " (", path, ")"));
  }
  if (!s.ok()) return s;
  if (m.step() != step) {
    return absl::DataLossError(absl::StrCat(path, ": names step ", m.step(), ", not ", step));
  }
  for (const CheckpointManifest::Shard& shard : m.shard()) {
    if (absl::Status bad = CheckStoreName(shard.path()); !bad.ok()) {
      return absl::DataLossError(absl::StrCat(path, ": shard of ps:", shard.ps_task(), ": ", bad.message()));
    }
  }
  return m;
}

std::vector<int64_t> ManifestStore::Steps() const {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return steps;
  while (dirent* e = ::readdir(d)) {
    absl::string_view name = e->d_name;
    if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) continue;
    name.remove_prefix(strlen(kPrefix));
    name.remove_suffix(strlen(kSuffix));
    int64_t step;
    if (absl::SimpleAtoi(name, &step)) steps.push_back(step);
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<CheckpointManifest> ManifestStore::LatestValid(std::vector<std::string>* skipped) const {
  std::vector<int64_t> steps = Steps();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    absl::StatusOr<CheckpointManifest> m = Read(*it);
    if (m.ok()) return m;
    LOG(WARNING) << "skipping checkpoint: " << m.status();
    if (skipped != nullptr) skipped->push_back(std::string(m.status().message()));
  }
  return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", dir_));
}

std::vector<int64_t> ManifestStore::Retained(int keep) const {
  const std::vector<int64_t> steps = Steps();
  const size_t first = steps.size() > static_cast<size_t>(std::max(keep, 1)) ? steps.size() - std::max(keep, 1) : 0;
  std::vector<int64_t> kept(steps.begin() + first, steps.end());
  // Every shard a whole snapshot (a manifest that does not read: no).
  auto all_full = [this](int64_t step) {
    absl::StatusOr<CheckpointManifest> m = Read(step);
    if (!m.ok()) return false;
    for (const CheckpointManifest::Shard& s : m->shard()) {
      if (s.delta()) return false;
    }
    return true;
  };
  bool any_delta = false;
  for (int64_t step : kept) any_delta |= !all_full(step);
  if (!any_delta) return kept;
  int64_t base = -1;
  for (int64_t step : kept) {
    if (all_full(step)) {
      base = step;
      break;
    }
  }
  size_t i = first;  // steps[0, i) are the candidates older than `base`
  if (base < 0) {
    while (i > 0 && base < 0) {
      if (all_full(steps[--i])) base = steps[i];
    }
    if (base >= 0) kept.push_back(base);
  }
  while (base >= 0 && i > 0) {
    if (all_full(steps[--i])) {
      kept.push_back(steps[i]);  // shares no file with B
      break;
    }
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<int64_t> ManifestStore::Prune(int keep) {
  const std::vector<int64_t> retained = Retained(keep);
  std::vector<int64_t> removed;
  for (int64_t step : Steps()) {
    if (std::binary_search(retained.begin(), retained.end(), step)) continue;
    if (::unlink(PathFor(step).c_str()) == 0) removed.push_back(step);
  }
  return removed;
}

}  // namespace psrt
