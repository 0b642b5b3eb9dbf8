#include "chief/export_formats/h5_writer.h"

#include <hdf5.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace psrt {
namespace {

absl::Status Failed(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat("HDF5: cannot ", what, " ", path));
}

// True if a link `path` exists (every component above it must exist too:
// H5Lexists is asked one level at a time).
bool Exists(hid_t file, const std::string& path) {
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    prefix = prefix.empty() ? std::string(part) : absl::StrCat(prefix, "/", part);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

absl::Status CheckPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("HDF5: empty object path");
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(absl::StrCat("HDF5: bad object path \"", path, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status AddStringAttribute(hid_t object, const std::string& path, const std::string& name,
                                const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  if (type < 0) return Failed("make a string type for", path);
  absl::Cleanup close_type = [type] { H5Tclose(type); };
  if (H5Tset_size(type, H5T_VARIABLE) < 0 || H5Tset_cset(type, H5T_CSET_UTF8) < 0) {
    return Failed("make a string type for", path);
  }
  hid_t space = H5Screate(H5S_SCALAR);
  if (space < 0) return Failed("make a dataspace for", path);
  absl::Cleanup close_space = [space] { H5Sclose(space); };
  hid_t attr = H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr < 0) return Failed(absl::StrCat("create attribute \"", name, "\" of"), path);
  absl::Cleanup close_attr = [attr] { H5Aclose(attr); };
  const char* data = value.c_str();
  if (H5Awrite(attr, type, &data) < 0) return Failed(absl::StrCat("write attribute \"", name, "\" of"), path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<H5Writer>> H5Writer::Create() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors come back as Status
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return absl::InternalError("HDF5: cannot make a file access property list");
  absl::Cleanup close_fapl = [fapl] { H5Pclose(fapl); };
  // In memory, grown 1 MiB at a time, never written to disk.
  if (H5Pset_fapl_core(fapl, 1 << 20, /*backing_store=*/0) < 0) {
    return absl::InternalError("HDF5: cannot select the in-memory driver");
  }
  hid_t file = H5Fcreate("psrt-export.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (file < 0) return absl::InternalError("HDF5: cannot create a file in memory");
  return std::unique_ptr<H5Writer>(new H5Writer(file));
}

H5Writer::~H5Writer() {
  if (file_ >= 0) H5Fclose(file_);
}

absl::Status H5Writer::AddGroup(const std::string& path,
                                const std::vector<std::pair<std::string, std::string>>& attributes) {
  if (auto s = CheckPath(path); !s.ok()) return s;
  if (Exists(file_, path)) return absl::AlreadyExistsError(absl::StrCat("HDF5: ", path, " exists"));
  std::string prefix;
  hid_t group = -1;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    prefix = prefix.empty() ? std::string(part) : absl::StrCat(prefix, "/", part);
    if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) > 0) continue;
    if (group >= 0) H5Gclose(group);
    group = H5Gcreate2(file_, prefix.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (group < 0) return Failed("create group", prefix);
  }
  absl::Cleanup close_group = [group] { H5Gclose(group); };
  for (const auto& [name, value] : attributes) {
    if (auto s = AddStringAttribute(group, path, name, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status H5Writer::AddFloatDataset(const std::string& path, const Tensor& t) {
  return AddDataset(path, t, DT_FLOAT);
}

absl::Status H5Writer::AddInt64Dataset(const std::string& path, const Tensor& t) {
  return AddDataset(path, t, DT_INT64);
}

absl::Status H5Writer::AddDataset(const std::string& path, const Tensor& t, DataType dtype) {
  if (auto s = CheckPath(path); !s.ok()) return s;
  if (t.dtype() != dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("HDF5: ", path, " must be ", DataTypeName(dtype), ", is ", DataTypeName(t.dtype())));
  }
  const bool is_float = dtype == DT_FLOAT;
  std::vector<hsize_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  hid_t space =
      dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  if (space < 0) return Failed(absl::StrCat("make dataspace ", t.shape().ToString(), " for"), path);
  absl::Cleanup close_space = [space] { H5Sclose(space); };
  hid_t ds = H5Dcreate2(file_, path.c_str(), is_float ? H5T_IEEE_F32LE : H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                        H5P_DEFAULT);
  if (ds < 0) return Failed("create dataset", path);
  absl::Cleanup close_ds = [ds] { H5Dclose(ds); };
  if (t.NumElements() > 0 &&
      H5Dwrite(ds, is_float ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0) {
    return Failed("write dataset", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> H5Writer::Finish() {
  if (file_ < 0) return absl::FailedPreconditionError("HDF5: the file is already finished");
  hid_t file = file_;
  file_ = -1;
  absl::Cleanup close_file = [file] { H5Fclose(file); };
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) return absl::InternalError("HDF5: cannot flush the file");
  ssize_t size = H5Fget_file_image(file, nullptr, 0);
  if (size < 0) return absl::InternalError("HDF5: cannot size the file image");
  std::string bytes(static_cast<size_t>(size), '\0');
  if (H5Fget_file_image(file, bytes.data(), bytes.size()) != size) {
    return absl::InternalError("HDF5: cannot copy the file image");
  }
  return bytes;
}

}  // namespace psrt
