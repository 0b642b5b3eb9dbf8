// An HDF5 file built in memory with Debian's libhdf5 (its "core" driver,
// no backing file), for the .weights.h5 files Keras 3 reads with h5py:
// groups with string attributes and float32 (and int64) datasets, nothing
// more.
//
//   ASSIGN_OR_RETURN(auto h5, H5Writer::Create());
//   RETURN_IF_ERROR(h5->AddGroup("layers/dense/vars", {{"name", "dense_1"}}));
//   RETURN_IF_ERROR(h5->AddFloatDataset("layers/dense/vars/0", kernel));
//   ASSIGN_OR_RETURN(std::string bytes, h5->Finish());
//
// One thread at a time per writer. libhdf5's automatic error printing is
// turned off (errors come back as Status naming the object instead).
#ifndef PSRT_CHIEF_EXPORT_FORMATS_H5_WRITER_H_
#define PSRT_CHIEF_EXPORT_FORMATS_H5_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace psrt {

class H5Writer {
 public:
  // An empty file in memory. INTERNAL if libhdf5 cannot make one.
  static absl::StatusOr<std::unique_ptr<H5Writer>> Create();
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  // Creates the group at `path` ("a/b/c", no leading '/'), and each missing
  // group above it, with variable-length UTF-8 string attributes as h5py
  // writes a Python str. INVALID_ARGUMENT for an empty path or component,
  // ALREADY_EXISTS if `path` exists; INTERNAL naming the path if libhdf5
  // fails.
  absl::Status AddGroup(const std::string& path,
                        const std::vector<std::pair<std::string, std::string>>& attributes = {});

  // A contiguous little-endian float32 dataset at `path` (its group must
  // exist) with `t`'s shape and values. INVALID_ARGUMENT naming the path for
  // a tensor that is not DT_FLOAT; INTERNAL naming the path if libhdf5 fails.
  absl::Status AddFloatDataset(const std::string& path, const Tensor& t);

  // The same for a DT_INT64 tensor (little-endian int64, as numpy's int64
  // Keras writes an optimizer's iteration count with).
  absl::Status AddInt64Dataset(const std::string& path, const Tensor& t);

  // Closes the file and returns its bytes. Nothing may be called after.
  absl::StatusOr<std::string> Finish();

 private:
  explicit H5Writer(int64_t file) : file_(file) {}
  absl::Status AddDataset(const std::string& path, const Tensor& t, DataType dtype);

  int64_t file_;  // hid_t; negative once closed
};

}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_H5_WRITER_H_
