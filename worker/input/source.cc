#include "worker/input/source.h"

#include "absl/strings/str_cat.h"
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

absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSource(const InputDef& input,
                                                          const DataSource& split) {
  if (split.files_size() == 0) return absl::InvalidArgumentError("input split lists no files");
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

}  // namespace psrt
