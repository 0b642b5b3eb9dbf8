#include "chief/export_formats/tf_bundle_writer.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/io/crc32c.h"
#include "leveldb/env.h"
#include "leveldb/options.h"
#include "leveldb/table_builder.h"

namespace psrt {
namespace {

void PutVarint64(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutFixed32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

absl::Status FromLevelDb(const leveldb::Status& s, const std::string& path) {
  if (s.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(path, ": ", s.ToString()));
}

// Writes `bytes` to `path` through a temporary file; durable before it
// returns (the checkpoint may be copied off the machine at once).
absl::Status WriteFileDurably(leveldb::Env* env, const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  leveldb::WritableFile* raw = nullptr;
  leveldb::Status s = env->NewWritableFile(tmp, &raw);
  if (!s.ok()) return FromLevelDb(s, tmp);
  std::unique_ptr<leveldb::WritableFile> file(raw);
  s = file->Append(bytes);
  if (s.ok()) s = file->Sync();
  if (s.ok()) s = file->Close();
  if (s.ok()) s = env->RenameFile(tmp, path);
  if (!s.ok()) env->RemoveFile(tmp);
  return FromLevelDb(s, path);
}

}  // namespace

absl::Status TfBundleWriter::CheckKey(const std::string& key) const {
  // The empty key holds the header: a tensor there would shadow it.
  if (key.empty()) return absl::InvalidArgumentError("a checkpoint key must not be empty");
  if (entries_.count(key)) return absl::InvalidArgumentError(absl::StrCat("duplicate checkpoint key ", key));
  return absl::OkStatus();
}

absl::Status TfBundleWriter::AddFloat(const std::string& key, const Tensor& value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (value.dtype() != DT_FLOAT) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": only float tensors are exported, not ", DataType_Name(value.dtype())));
  }
  tfckpt::BundleEntry e;
  e.set_dtype(kTfFloat);
  for (int64_t d : value.shape().dims()) e.mutable_shape()->add_dim()->set_size(d);
  e.set_offset(static_cast<int64_t>(data_.size()));
  e.set_size(static_cast<int64_t>(value.TotalBytes()));
  e.set_crc32c(crc32c::Mask(crc32c::Value(value.raw_data(), value.TotalBytes())));
  data_.append(static_cast<const char*>(value.raw_data()), value.TotalBytes());
  entries_[key] = e;
  return absl::OkStatus();
}

absl::Status TfBundleWriter::AddString(const std::string& key, const std::string& value) {
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (value.size() > UINT32_MAX) return absl::InvalidArgumentError(absl::StrCat(key, ": string over 4 GiB"));
  std::string bytes;
  PutVarint64(&bytes, value.size());
  // TensorFlow checksums each length as the uint32 it fits in, not as the
  // varint bytes on disk.
  std::string len32;
  PutFixed32(&len32, static_cast<uint32_t>(value.size()));
  uint32_t crc = crc32c::Value(len32.data(), len32.size());
  std::string length_checksum;
  PutFixed32(&length_checksum, crc32c::Mask(crc));
  bytes += length_checksum;
  crc = crc32c::Extend(crc, length_checksum.data(), length_checksum.size());
  crc = crc32c::Extend(crc, value.data(), value.size());
  bytes += value;
  tfckpt::BundleEntry e;
  e.set_dtype(kTfString);
  e.mutable_shape();  // a scalar: present, no dims
  e.set_offset(static_cast<int64_t>(data_.size()));
  e.set_size(static_cast<int64_t>(bytes.size()));
  e.set_crc32c(crc32c::Mask(crc));
  data_ += bytes;
  entries_[key] = e;
  return absl::OkStatus();
}

absl::Status TfBundleWriter::Finish(const std::string& prefix) {
  leveldb::Env* env = leveldb::Env::Default();
  if (absl::Status s = WriteFileDurably(env, DataPath(prefix), data_); !s.ok()) return s;

  const std::string index = IndexPath(prefix), tmp = index + ".tmp";
  leveldb::WritableFile* raw = nullptr;
  leveldb::Status s = env->NewWritableFile(tmp, &raw);
  if (!s.ok()) return FromLevelDb(s, tmp);
  std::unique_ptr<leveldb::WritableFile> file(raw);
  leveldb::Options options;
  // TensorFlow reads uncompressed tables on every build; Snappy only where
  // it was compiled in.
  options.compression = leveldb::kNoCompression;
  leveldb::TableBuilder table(options, file.get());
  tfckpt::BundleHeader header;
  header.set_num_shards(1);
  header.set_endianness(tfckpt::BundleHeader::LITTLE);
  header.mutable_version()->set_producer(1);  // TensorFlow's kTensorBundleVersion
  table.Add("", header.SerializeAsString());   // "" sorts first
  for (const auto& [key, entry] : entries_) table.Add(key, entry.SerializeAsString());
  s = table.Finish();
  if (s.ok()) s = file->Sync();
  if (s.ok()) s = file->Close();
  if (s.ok()) s = env->RenameFile(tmp, index);
  if (!s.ok()) env->RemoveFile(tmp);
  return FromLevelDb(s, index);
}

}  // namespace psrt
