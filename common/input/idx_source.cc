// IDX (the MNIST format, plain or gzip): an images file of unsigned bytes
// [n, rows, cols] and a labels file [n]. Both are read whole once (60k
// Fashion-MNIST images are 47 MB) and kept as bytes; floats are made per
// example. A file is inflated a chunk at a time against the size its header
// gives, so a gzip bomb is refused after at most that many bytes, never
// held whole.
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/input/source.h"

namespace psrt {
namespace {

struct IdxFile {
  std::vector<int64_t> dims;
  std::string data;  // unsigned bytes, row-major
};

// A plain or gzip file read a chunk at a time (gzopen reads plain files too).
class MaybeGzip {
 public:
  explicit MaybeGzip(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {}
  ~MaybeGzip() {
    if (f_ != nullptr) gzclose(f_);
  }
  MaybeGzip(const MaybeGzip&) = delete;
  MaybeGzip& operator=(const MaybeGzip&) = delete;

  absl::Status Open() const {
    return f_ == nullptr ? absl::NotFoundError(absl::StrCat("cannot open ", path_)) : absl::OkStatus();
  }
  // Appends up to `n` more bytes to *out; how many (0 at the end).
  absl::StatusOr<size_t> Read(size_t n, std::string* out) {
    const size_t had = out->size();
    out->resize(had + n);
    const int got = gzread(f_, out->data() + had, static_cast<unsigned>(n));
    int err = 0;
    const char* msg = gzerror(f_, &err);
    if (got < 0 || (err != Z_OK && err != Z_STREAM_END)) {
      out->resize(had);
      return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip stream: ", msg));
    }
    out->resize(had + got);
    return static_cast<size_t>(got);
  }
  // Reads until *out holds `n` bytes or the file ends. *out grows as the
  // bytes come, to `n` at most.
  absl::Status ReadUpTo(size_t n, std::string* out) {
    while (out->size() < n) {
      const size_t chunk = std::min<size_t>(n - out->size(), 1 << 16);
      if (out->capacity() < out->size() + chunk) {
        out->reserve(std::min(n, std::max(2 * out->capacity(), out->size() + chunk)));
      }
      ASSIGN_OR_RETURN(size_t got, Read(chunk, out));
      if (got == 0) break;
    }
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  gzFile f_;
};

absl::StatusOr<IdxFile> ReadIdx(const std::string& path) {
  MaybeGzip in(path);
  RETURN_IF_ERROR(in.Open());
  std::string header;
  RETURN_IF_ERROR(in.ReadUpTo(4, &header));
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(header[i]); };
  if (header.size() < 4 || u8(0) != 0 || u8(1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an IDX file (bad magic)"));
  }
  if (u8(2) != 0x08) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": IDX element type 0x", absl::Hex(u8(2)), " is not unsigned byte"));
  }
  int ndims = u8(3);
  if (ndims >= 1) RETURN_IF_ERROR(in.ReadUpTo(4 + 4 * static_cast<size_t>(ndims), &header));
  if (ndims < 1 || header.size() < 4 + 4 * static_cast<size_t>(ndims)) {
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
  // The data as it comes (a header's count alone allocates nothing), and
  // one byte past it at most: a file longer than its header says is refused.
  RETURN_IF_ERROR(in.ReadUpTo(static_cast<size_t>(count) + 1, &f.data));
  if (f.data.size() > static_cast<uint64_t>(count)) {
    return absl::DataLossError(absl::StrCat(path, ": IDX data is more than the ", count, " bytes its header gives (",
                                            absl::StrJoin(f.dims, " x "), "): refused unread past them"));
  }
  if (f.data.size() != static_cast<uint64_t>(count)) {
    return absl::DataLossError(
        absl::StrCat(path, ": IDX data is ", f.data.size(), " bytes, its header says ", count, " (truncated?)"));
  }
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
