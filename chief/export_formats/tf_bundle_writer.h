// Writes a TensorFlow checkpoint in its tensor-bundle format (what
// tf.train.Checkpoint and tf.train.load_checkpoint read), one shard:
//
//   PREFIX.data-00000-of-00001  the tensors' bytes, one after another
//   PREFIX.index                a LevelDB-format table (Debian's libleveldb
//                               writes it), keys sorted bytewise: the
//                               BundleHeader under the empty key, then a
//                               BundleEntry (dtype, shape, offset, size,
//                               masked CRC32C) per tensor name
//
// Floats are stored little-endian as they lie in memory (x86 and ARM hosts;
// the header says LITTLE). A string tensor is TensorFlow's layout: the
// elements' lengths as varint64s, the masked CRC32C of the lengths (each
// as a little-endian uint32), then the bytes; its entry's CRC covers the
// lengths, that checksum and the bytes.
//
// Files are written under temporary names and renamed, the index last, so
// a failed export leaves no index that names missing data.
//
// Example:
//   TfBundleWriter w;
//   RETURN_IF_ERROR(w.AddFloat("dense/kernel", tensor));
//   RETURN_IF_ERROR(w.Finish("/tmp/model"));  // /tmp/model.index + .data-...
#ifndef PSRT_CHIEF_EXPORT_FORMATS_TF_BUNDLE_WRITER_H_
#define PSRT_CHIEF_EXPORT_FORMATS_TF_BUNDLE_WRITER_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "common/tensor.h"
#include "proto/tf_checkpoint.pb.h"

namespace psrt {

// TensorFlow's DataType numbers (tensorflow/core/framework/types.proto).
inline constexpr int kTfFloat = 1;
inline constexpr int kTfString = 7;

class TfBundleWriter {
 public:
  // A DT_FLOAT tensor. INVALID_ARGUMENT for an empty or duplicate key, or a
  // tensor that is not float.
  absl::Status AddFloat(const std::string& key, const Tensor& value);
  // A scalar DT_STRING tensor (e.g. the serialized object graph).
  absl::Status AddString(const std::string& key, const std::string& value);

  // Writes PREFIX.index and PREFIX.data-00000-of-00001; the directory must
  // exist. Errors name the file. The writer is spent afterwards.
  absl::Status Finish(const std::string& prefix);

  static std::string DataPath(const std::string& prefix) { return prefix + ".data-00000-of-00001"; }
  static std::string IndexPath(const std::string& prefix) { return prefix + ".index"; }

 private:
  absl::Status CheckKey(const std::string& key) const;

  std::string data_;  // the whole data shard, in the order tensors were added
  std::map<std::string, tfckpt::BundleEntry> entries_;  // sorted as the index needs
};

}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_TF_BUNDLE_WRITER_H_
