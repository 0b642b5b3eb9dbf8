// TFRecord files of tf.train.Example, plain or compressed
// (InputDef.compression): each listed feature is read by name (DENSE from a
// float_list or int64_list of exactly the shape's size -- an int64_list
// only with dtype: DT_INT64 --, with decode: RAW_UINT8 from one
// bytes_list value of that many bytes, or with decode: ENCODED_IMAGE from
// one bytes_list value holding a PNG or JPEG of that [H, W, C]; SPARSE from
// an int64_list), the label from InputDef.label_key (default "label"), an
// int64_list or float_list of one value.
#include "absl/strings/str_cat.h"
#include "common/input/image_decode.h"
#include "common/io/record_io.h"
#include "common/status_macros.h"
#include "proto/example.pb.h"
#include "common/input/source.h"

namespace psrt {
namespace {

class TfRecordSource : public ExampleSource {
 public:
  TfRecordSource(const InputDef& input, const DataSource& split)
      : input_(input),
        files_(split.files().begin(), split.files().end()),
        compression_(TfRecordCompression(input)) {
    reader_options_.compression = compression_;
    const int mb = MaxRecordMb(input);  // one example is kilobytes
    reader_options_.max_record_bytes = static_cast<uint64_t>(mb) << 20;
    reader_options_.bound_name = absl::StrCat("input { max_record_mb: ", mb, " } in the job");
    label_key_ = input.label_key().empty() ? "label" : input.label_key();
  }

  absl::Status Reset() override {
    if (files_.empty()) return absl::InvalidArgumentError("no input files");
    for (const std::string& f : files_) RETURN_IF_ERROR(RecordReader::Open(f, reader_options_).status());
    file_index_ = 0;
    reader_.reset();
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next(Example* ex) override {
    std::string record;
    while (true) {
      if (file_index_ >= files_.size()) return false;
      if (reader_ == nullptr) {
        ASSIGN_OR_RETURN(reader_, RecordReader::Open(files_[file_index_], reader_options_));
      }
      ASSIGN_OR_RETURN(bool more, reader_->Next(&record));
      if (more) break;
      reader_.reset();
      ++file_index_;
    }
    tf::Example proto;
    if (!proto.ParseFromString(record)) return Error("is not a tf.train.Example");
    const auto& fmap = proto.features().feature();
    ex->features.assign(input_.feature_size(), FeatureValues());
    for (int f = 0; f < input_.feature_size(); ++f) {
      const FeatureDef& def = input_.feature(f);
      auto it = fmap.find(def.name());
      if (it == fmap.end()) return Error(absl::StrCat("has no feature \"", def.name(), "\""));
      const tf::Feature& feat = it->second;
      FeatureValues& out = ex->features[f];
      if (def.kind() == FeatureDef::SPARSE) {
        if (feat.kind_case() != tf::Feature::kInt64List) {
          return Error(absl::StrCat("feature \"", def.name(), "\" is not an int64_list of ids"));
        }
        out.ids.assign(feat.int64_list().value().begin(), feat.int64_list().value().end());
        continue;
      }
      int64_t want = 1;
      for (int64_t d : def.shape()) want *= d;
      if (def.decode() == FeatureDef::RAW_UINT8) {
        RETURN_IF_ERROR(DecodeRawUint8(def, feat, want, &out.floats));
        continue;
      }
      if (def.decode() == FeatureDef::ENCODED_IMAGE) {
        RETURN_IF_ERROR(DecodeEncodedImage(def, feat, &out.floats));
        continue;
      }
      if (def.dtype() == DT_INT64) {
        // Ids as they are: through a float they would lose bits past 2^24.
        if (feat.kind_case() != tf::Feature::kInt64List) {
          return Error(absl::StrCat("feature \"", def.name(), "\" (dtype: DT_INT64) is not an int64_list"));
        }
        out.ids.assign(feat.int64_list().value().begin(), feat.int64_list().value().end());
        if (static_cast<int64_t>(out.ids.size()) != want) {
          return Error(absl::StrCat("feature \"", def.name(), "\" has ", out.ids.size(), " values, its shape needs ",
                                    want));
        }
        continue;
      }
      if (feat.kind_case() == tf::Feature::kFloatList) {
        out.floats.assign(feat.float_list().value().begin(), feat.float_list().value().end());
      } else if (feat.kind_case() == tf::Feature::kInt64List) {
        for (int64_t v : feat.int64_list().value()) out.floats.push_back(static_cast<float>(v));
      } else {
        return Error(absl::StrCat("feature \"", def.name(), "\" is not numeric"));
      }
      if (static_cast<int64_t>(out.floats.size()) != want) {
        return Error(absl::StrCat("feature \"", def.name(), "\" has ", out.floats.size(),
                                  " values, its shape needs ", want));
      }
    }
    auto label = fmap.find(label_key_);
    if (label == fmap.end()) return Error(absl::StrCat("has no label \"", label_key_, "\""));
    const tf::Feature& l = label->second;
    if (l.kind_case() == tf::Feature::kInt64List && l.int64_list().value_size() == 1) {
      ex->label = static_cast<float>(l.int64_list().value(0));
    } else if (l.kind_case() == tf::Feature::kFloatList && l.float_list().value_size() == 1) {
      ex->label = l.float_list().value(0);
    } else {
      return Error(absl::StrCat("label \"", label_key_, "\" is not one number"));
    }
    return true;
  }

 private:
  // One bytes_list value of exactly `want` bytes, each an unsigned pixel
  // times the feature's scale.
  absl::Status DecodeRawUint8(const FeatureDef& def, const tf::Feature& feat, int64_t want,
                              std::vector<float>* out) const {
    if (feat.kind_case() != tf::Feature::kBytesList || feat.bytes_list().value_size() != 1) {
      return Error(absl::StrCat("feature \"", def.name(),
                                "\" (decode: RAW_UINT8) is not a bytes_list of one value"));
    }
    const std::string& raw = feat.bytes_list().value(0);
    if (static_cast<int64_t>(raw.size()) != want) {
      const ImageKind kind = SniffImage(raw);
      return Error(absl::StrCat("feature \"", def.name(), "\" (decode: RAW_UINT8) has ", raw.size(),
                                " bytes, its shape needs ", want,
                                kind == ImageKind::kNone
                                    ? ""
                                    : absl::StrCat("; it looks like a ", ImageKindName(kind),
                                                   " image: use decode: ENCODED_IMAGE")));
    }
    const float scale = def.scale() == 0 ? 1.0f : def.scale();
    out->resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) (*out)[i] = static_cast<uint8_t>(raw[i]) * scale;
    return absl::OkStatus();
  }

  // One bytes_list value holding a PNG or JPEG of the feature's [H, W, C]
  // (CheckInput made sure of the rank), each pixel byte times its scale.
  absl::Status DecodeEncodedImage(const FeatureDef& def, const tf::Feature& feat, std::vector<float>* out) {
    if (feat.kind_case() != tf::Feature::kBytesList || feat.bytes_list().value_size() != 1) {
      return Error(absl::StrCat("feature \"", def.name(),
                                "\" (decode: ENCODED_IMAGE) is not a bytes_list of one value"));
    }
    absl::Status s = DecodeImage(feat.bytes_list().value(0), def.shape(0), def.shape(1), def.shape(2), &pixels_);
    if (!s.ok()) return Error(absl::StrCat("feature \"", def.name(), "\" (decode: ENCODED_IMAGE) ", s.message()));
    const float scale = def.scale() == 0 ? 1.0f : def.scale();
    out->resize(pixels_.size());
    for (size_t i = 0; i < pixels_.size(); ++i) (*out)[i] = pixels_[i] * scale;
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        files_[file_index_], ": record ", reader_ ? reader_->records_read() - 1 : 0, ": ", what));
  }

  const InputDef input_;
  const std::vector<std::string> files_;
  const Compression compression_;
  RecordReaderOptions reader_options_;  // compression_ and the record bound
  std::string label_key_;
  size_t file_index_ = 0;
  std::unique_ptr<RecordReader> reader_;
  std::vector<uint8_t> pixels_;  // a decoded image, reused across records
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordSource(const InputDef& input,
                                                                  const DataSource& split) {
  if (input.feature_size() == 0) {
    return absl::InvalidArgumentError("TFRecord input must list its features (input.feature)");
  }
  auto source = std::make_unique<TfRecordSource>(input, split);
  RETURN_IF_ERROR(source->Reset());
  return std::unique_ptr<ExampleSource>(std::move(source));
}

}  // namespace psrt
