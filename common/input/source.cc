#include "common/input/source.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/input/file_list.h"
#include "common/status_macros.h"

namespace psrt {

absl::Status FillDefaultFeatures(InputDef* input) {
  if (input->feature_size() > 0) return absl::OkStatus();
  FeatureDef* f = input->add_feature();
  switch (input->format()) {
    case InputDef::IDX:
      f->set_name("image");
      f->add_shape(28);
      f->add_shape(28);
      f->add_shape(1);
      return absl::OkStatus();
    case InputDef::LIBSVM:
      f->set_name("ids");
      f->set_kind(FeatureDef::SPARSE);
      return absl::OkStatus();
    case InputDef::CSV:
      return absl::InvalidArgumentError(
          "CSV input must give its feature's shape (input.feature { name: \"features\" shape: N })");
    default:
      return absl::InvalidArgumentError("TFRecord input must list its features (input.feature)");
  }
}

absl::Status CheckInput(const InputDef& input) {
  if (!input.compression().empty()) {
    absl::StatusOr<Compression> c = ParseCompression(input.compression());
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("input.compression: ", c.status().message()));
    if (input.format() != InputDef::TFRECORD) {
      return absl::InvalidArgumentError(
          "input.compression: only TFRecord input takes it (IDX reads .gz files as they are)");
    }
  }
  for (int f = 0; f < input.feature_size(); ++f) {
    const FeatureDef& def = input.feature(f);
    const std::string field = absl::StrCat("input.feature[", f, "] (\"", def.name(), "\")");
    if (def.dtype() != DT_INVALID && def.dtype() != DT_FLOAT && def.dtype() != DT_INT64) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: ", DataType_Name(def.dtype()),
                                                     " is not DT_FLOAT or DT_INT64"));
    }
    if (def.dtype() == DT_INT64) {
      if (def.kind() != FeatureDef::DENSE) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".dtype: DT_INT64 is for DENSE features (a SPARSE feature's ids are int64 already)"));
      }
      if (input.format() == InputDef::LIBSVM) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: DT_INT64 needs IDX, CSV or TFRecord input"));
      }
    }
    const bool bytes_decode = def.decode() == FeatureDef::RAW_UINT8 || def.decode() == FeatureDef::ENCODED_IMAGE;
    const std::string decode_name = FeatureDef::Decode_Name(def.decode());
    if (bytes_decode) {
      if (def.kind() != FeatureDef::DENSE) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".decode: ", decode_name, " needs a DENSE feature"));
      }
      if (input.format() != InputDef::TFRECORD) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".decode: ", decode_name, " needs TFRecord input"));
      }
      if (def.decode() == FeatureDef::ENCODED_IMAGE &&
          (def.shape_size() != 3 || def.shape(2) < 1 || def.shape(2) > 4)) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".shape: decode: ENCODED_IMAGE needs [height, width, channels] (channels 1 gray, 3 RGB; "
            "2 or 4 with alpha, PNG only)"));
      }
      // The byte count a record must match, computed without overflow.
      int64_t bytes = 1;
      for (int64_t d : def.shape()) {
        if (d < 1 || d > (int64_t{1} << 31) / bytes) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, ".shape: dimension ", d, " is not positive or makes over 2^31 bytes"));
        }
        bytes *= d;
      }
    } else if (def.decode() != FeatureDef::NUMBERS) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".decode: unknown (", static_cast<int>(def.decode()), ")"));
    }
    if (def.scale() != 0) {
      if (!bytes_decode) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".scale: only decode: RAW_UINT8 or ENCODED_IMAGE takes it (input.scale scales every feature)"));
      }
      if (def.dtype() == DT_INT64) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".scale: ids (dtype: DT_INT64) are not scaled"));
      }
      if (!std::isfinite(def.scale()) || def.scale() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".scale: must be finite and positive, got ", def.scale()));
      }
      // Both would multiply this feature's pixels (input.scale applies
      // after the feature's own): 1/255 twice trains on [0, 1/255].
      if (def.scale() != 1 && input.scale() != 0 && input.scale() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".scale (", def.scale(), ") and input.scale (", input.scale(),
            ") would both scale this feature, one after the other: keep one -- the feature's scale for this "
            "feature alone, or input.scale for every feature -- and remove the other"));
      }
    }
  }
  return absl::OkStatus();
}

int MaxRecordMb(const InputDef& input) { return input.max_record_mb() > 0 ? input.max_record_mb() : 64; }

LineReader InputLines(const InputDef& input, const DataSource& split) {
  const int mb = MaxRecordMb(input);
  return LineReader({split.files().begin(), split.files().end()}, static_cast<uint64_t>(mb) << 20,
                    absl::StrCat("input { max_record_mb: ", mb, " } in the job"));
}

Compression TfRecordCompression(const InputDef& input) {
  if (input.compression().empty()) return Compression::kAuto;
  absl::StatusOr<Compression> c = ParseCompression(input.compression());
  return c.ok() ? *c : Compression::kAuto;
}

absl::StatusOr<int64_t> CountExamples(const InputDef& input, const DataSource& split) {
  InputDef filled = input;
  RETURN_IF_ERROR(FillDefaultFeatures(&filled));
  ASSIGN_OR_RETURN(auto source, OpenSource(filled, split));
  int64_t n = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool more, source->Skip());
    if (!more) return n;
    ++n;
  }
}

namespace {

// Keeps the first error of a source until Reset, as source.h promises: the
// line-based readers would otherwise carry on at the line after a bad one
// (found by tests/fuzz/input_source_fuzzer).
class StickyErrorSource : public ExampleSource {
 public:
  explicit StickyErrorSource(std::unique_ptr<ExampleSource> inner) : inner_(std::move(inner)) {}

  absl::Status Reset() override {
    error_ = absl::OkStatus();
    return Keep(inner_->Reset());
  }
  absl::StatusOr<bool> Next(Example* example) override {
    if (!error_.ok()) return error_;
    return Keep(inner_->Next(example));
  }
  absl::StatusOr<bool> Skip() override {
    if (!error_.ok()) return error_;
    return Keep(inner_->Skip());
  }

 private:
  absl::Status Keep(absl::Status s) {
    if (!s.ok()) error_ = s;
    return s;
  }
  absl::StatusOr<bool> Keep(absl::StatusOr<bool> r) {
    if (!r.ok()) error_ = r.status();
    return r;
  }

  std::unique_ptr<ExampleSource> inner_;
  absl::Status error_;
};

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenFormat(const InputDef& input,
                                                          const DataSource& split) {
  switch (input.format()) {
    case InputDef::IDX: return OpenIdxSource(input, split);
    case InputDef::CSV: return OpenCsvSource(input, split);
    case InputDef::LIBSVM: return OpenLibsvmSource(input, split);
    case InputDef::TFRECORD: return OpenTfRecordSource(input, split);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input format ", static_cast<int>(input.format())));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSource(const InputDef& input,
                                                          const DataSource& split) {
  if (split.files_size() == 0) return absl::InvalidArgumentError("input split lists no files");
  RETURN_IF_ERROR(CheckInput(input));
  // Patterns and directories expanded here, the one place every reader
  // (and the chief's counting and checks) opens files through.
  const std::string field = split.SerializeAsString() == input.train().SerializeAsString()  ? "input.train"
                            : split.SerializeAsString() == input.test().SerializeAsString() ? "input.test"
                                                                                             : "input split";
  ASSIGN_OR_RETURN(DataSource expanded, ExpandSplit(split, field));
  ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> source, OpenFormat(input, expanded));
  return std::unique_ptr<ExampleSource>(new StickyErrorSource(std::move(source)));
}

}  // namespace psrt
