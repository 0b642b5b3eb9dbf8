// IDX (the MNIST format, plain or gzip): an images file of unsigned bytes
// [n, rows, cols] and a labels file [n]. Both are read whole once (60k
// Fashion-MNIST images are 47 MB) and kept as bytes; floats are made per
// example.
#include <zlib.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/input/source.h"

namespace psrt {
namespace {

struct IdxFile {
  std::vector<int64_t> dims;
  std::string data;  // unsigned bytes, row-major
};

absl::StatusOr<std::string> ReadMaybeGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  std::string why = failed ? msg : "";
  gzclose(f);
  if (failed) return absl::DataLossError(absl::StrCat(path, ": corrupt gzip stream: ", why));
  return out;
}

absl::StatusOr<IdxFile> ReadIdx(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadMaybeGzip(path));
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  if (bytes.size() < 4 || u8(0) != 0 || u8(1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an IDX file (bad magic)"));
  }
  if (u8(2) != 0x08) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": IDX element type 0x", absl::Hex(u8(2)), " is not unsigned byte"));
  }
  int ndims = u8(3);
  if (ndims < 1 || bytes.size() < 4 + 4 * static_cast<size_t>(ndims)) {
    return absl::DataLossError(absl::StrCat(path, ": truncated IDX header"));
  }
  IdxFile f;
  int64_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    size_t o = 4 + 4 * d;
    int64_t v = (int64_t{u8(o)} << 24) | (u8(o + 1) << 16) | (u8(o + 2) << 8) | u8(o + 3);
    f.dims.push_back(v);
    // Up to 255 dims of 2^32: the product can overflow int64 (UB, and a
    // wrapped count could pass the size check below).
    if (__builtin_mul_overflow(count, v, &count)) {
      return absl::DataLossError(absl::StrCat(path, ": IDX header's dims overflow"));
    }
  }
  size_t header = 4 + 4 * ndims;
  if (bytes.size() - header != static_cast<size_t>(count)) {
    return absl::DataLossError(absl::StrCat(path, ": IDX data is ", bytes.size() - header,
                                            " bytes, its header says ", count, " (truncated?)"));
  }
  f.data = bytes.substr(header);
  return f;
}

class IdxSource : public ExampleSource {
 public:
  static absl::StatusOr<std::unique_ptr<IdxSource>> Open(const DataSource& split) {
    if (split.files_size() != 1 || split.labels_file().empty()) {
      return absl::InvalidArgumentError(
          "IDX input needs exactly one images file (files) and a labels_file");
    }
    auto s = std::unique_ptr<IdxSource>(new IdxSource());
    ASSIGN_OR_RETURN(s->images_, ReadIdx(split.files(0)));
    ASSIGN_OR_RETURN(s->labels_, ReadIdx(split.labels_file()));
    if (s->labels_.dims.size() != 1 || s->labels_.dims[0] != s->images_.dims[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          split.labels_file(), ": ", s->labels_.dims[0], " labels for ", s->images_.dims[0],
          " images in ", split.files(0)));
    }
    s->per_example_ = s->images_.data.size() / std::max<int64_t>(1, s->images_.dims[0]);
    return s;
  }

  absl::Status Reset() override {
    next_ = 0;
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next(Example* ex) override {
    if (next_ >= images_.dims[0]) return false;
    ex->features.assign(1, FeatureValues());
    auto& v = ex->features[0].floats;
    v.resize(per_example_);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(images_.data.data()) + next_ * per_example_;
    for (int64_t i = 0; i < per_example_; ++i) v[i] = p[i];
    ex->label = static_cast<uint8_t>(labels_.data[next_]);
    ++next_;
    return true;
  }

  absl::StatusOr<bool> Skip() override {
    if (next_ >= images_.dims[0]) return false;
    ++next_;
    return true;
  }

  const std::vector<int64_t>& image_dims() const { return images_.dims; }

 private:
  IdxSource() = default;
  IdxFile images_;
  IdxFile labels_;
  int64_t per_example_ = 0;
  int64_t next_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenIdxSource(const InputDef& input,
                                                             const DataSource& split) {
  ASSIGN_OR_RETURN(auto source, IdxSource::Open(split));
  if (input.feature_size() != 1 || input.feature(0).kind() != FeatureDef::DENSE) {
    return absl::InvalidArgumentError("IDX input gives exactly one DENSE feature");
  }
  int64_t want = 1, have = 1;
  for (int64_t d : input.feature(0).shape()) want *= d;
  for (size_t i = 1; i < source->image_dims().size(); ++i) {
    // Cannot overflow when dims[0] > 0 (ReadIdx checked the whole product).
    if (__builtin_mul_overflow(have, source->image_dims()[i], &have)) have = -1;
  }
  if (want != have) {
    return absl::InvalidArgumentError(absl::StrCat("feature \"", input.feature(0).name(),
                                                   "\" needs ", want, " values per example, ",
                                                   split.files(0), " has ", have));
  }
  return std::unique_ptr<ExampleSource>(std::move(source));
}

}  // namespace psrt
