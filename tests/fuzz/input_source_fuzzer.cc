// Fuzzes the worker's example readers (worker/input/): libsvm, CSV, IDX and
// TFRecord of tf.train.Example, each through OpenSource as a job would use
// it, then MakeBatch over what they return.
//
// Input layout: byte 0 picks the format (low 2 bits) and, for CSV, whether
// the label is named in a header (bit 2), bit 3 makes labels class indices;
// for TFRecord bit 2 reads "x" as RAW_UINT8 pixels (each then in [0, 1]) and
// bit 4 configures GZIP compression (else detected); for IDX bytes 1-2 say
// where the images file ends and the labels file begins; the rest is file
// content.
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "common/input/example.h"
#include "common/input/source.h"

using psrt::fuzz::Check;

namespace {

constexpr int kMaxExamples = 4096;  // a header may claim billions
constexpr int kBatch = 8;

psrt::InputDef MakeInput(uint8_t selector) {
  psrt::InputDef input;
  input.set_batch_size(kBatch);
  auto dense = [&](const char* name, std::vector<int64_t> shape) {
    psrt::FeatureDef* f = input.add_feature();
    f->set_name(name);
    for (int64_t d : shape) f->add_shape(d);
  };
  switch (selector & 3) {
    case 0:
      input.set_format(psrt::InputDef::LIBSVM);
      break;
    case 1:
      input.set_format(psrt::InputDef::CSV);
      dense("features", {3});
      if (selector & 4) input.set_label_key("label");
      break;
    case 2:
      input.set_format(psrt::InputDef::IDX);
      dense("image", {2, 2, 1});
      input.set_num_classes(10);
      break;
    case 3: {
      input.set_format(psrt::InputDef::TFRECORD);
      dense("x", {2});
      if (selector & 4) {
        input.mutable_feature(0)->set_decode(psrt::FeatureDef::RAW_UINT8);
        input.mutable_feature(0)->set_scale(1.0f / 255);
      }
      if (selector & 16) input.set_compression("GZIP");
      psrt::FeatureDef* ids = input.add_feature();
      ids->set_name("ids");
      ids->set_kind(psrt::FeatureDef::SPARSE);
      break;
    }
  }
  // Class labels check each label is an integer in range (any format).
  if (selector & 8) input.set_num_classes(10);
  Check(psrt::FillDefaultFeatures(&input).ok(), "harness input has no features");
  return input;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string main_path = psrt::fuzz::ScratchPath("input.data");
  static const std::string labels_path = psrt::fuzz::ScratchPath("input.labels");
  const uint8_t selector = data[0];
  psrt::InputDef input = MakeInput(selector);
  ++data;
  --size;

  psrt::DataSource split;
  split.add_files(main_path);
  if (input.format() == psrt::InputDef::IDX) {
    if (size < 2) return 0;
    size_t cut = (data[0] | (size_t{data[1]} << 8)) % (size - 1);
    data += 2;
    size -= 2;
    psrt::fuzz::WriteFile(main_path, data, cut);
    psrt::fuzz::WriteFile(labels_path, data + cut, size - cut);
    split.set_labels_file(labels_path);
  } else {
    psrt::fuzz::WriteFile(main_path, data, size);
  }

  absl::StatusOr<std::unique_ptr<psrt::ExampleSource>> source = psrt::OpenSource(input, split);
  if (!source.ok()) return 0;
  std::vector<psrt::Example> batch;
  for (int i = 0; i < kMaxExamples; ++i) {
    psrt::Example ex;
    absl::StatusOr<bool> more = (*source)->Next(&ex);
    if (!more.ok()) {
      // A failed source stays failed (source.h).
      Check(!(*source)->Next(&ex).ok(), "a failed source recovered");
      break;
    }
    if (!*more) break;
    Check(ex.features.size() == static_cast<size_t>(input.feature_size()),
          "example has a value list per feature");
    for (int f = 0; f < input.feature_size(); ++f) {
      if (input.feature(f).decode() == psrt::FeatureDef::RAW_UINT8) {
        Check(ex.features[f].floats.size() == 2, "RAW_UINT8 gives the shape's count of values");
        for (float v : ex.features[f].floats) Check(v >= 0 && v <= 1, "a scaled byte is outside [0, 1]");
      }
      if (input.feature(f).kind() == psrt::FeatureDef::SPARSE) {
        for (int64_t id : ex.features[f].ids) {
          if (input.format() == psrt::InputDef::LIBSVM) Check(id >= 0, "negative libsvm id");
        }
      }
    }
    batch.push_back(std::move(ex));
    if (batch.size() == kBatch) {
      (void)psrt::MakeBatch(input, batch);
      batch.clear();
    }
  }
  if (!batch.empty()) (void)psrt::MakeBatch(input, batch);
  // Reset and read again: the same first example (or the same error).
  (void)(*source)->Reset();
  return 0;
}
