// ExampleSource: the examples of one split (train or test), in file order,
// parsed from one of the formats of InputDef: IDX, CSV, libsvm, TFRecord.
//
// Every parse error names the file and the record or line, and leaves the
// source failed: Next keeps returning the error.
//
//   ASSIGN_OR_RETURN(auto source, OpenSource(job.input(), job.input().train()));
//   Example ex;
//   while (true) {
//     ASSIGN_OR_RETURN(bool more, source->Next(&ex));
//     if (!more) break;
//   }
//
// Not thread-safe: the dataset's prefetch thread owns it.
#ifndef PSRT_COMMON_INPUT_SOURCE_H_
#define PSRT_COMMON_INPUT_SOURCE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/input/example.h"
#include "common/input/text_source.h"
#include "common/io/input_stream.h"
#include "proto/job.pb.h"

namespace psrt {

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  // Back to the first example of the first file.
  virtual absl::Status Reset() = 0;
  // The next example; false after the last one.
  virtual absl::StatusOr<bool> Next(Example* example) = 0;
  // Passes over one example (cheaper than Next where the format allows).
  virtual absl::StatusOr<bool> Skip() {
    Example scratch;
    return Next(&scratch);
  }
};

// Checks the features InputDef asks for fit the format, then opens the
// split's files, patterns and directories expanded (file_list.h). With no
// features listed, each format's default is used (see FillDefaultFeatures).
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenSource(const InputDef& input,
                                                          const DataSource& split);

// The features a format gives when the job lists none: IDX "image"
// [rows, cols, 1]; CSV "features" [columns - 1]; libsvm SPARSE "ids".
// TFRecord has no default: its features must be listed.
absl::Status FillDefaultFeatures(InputDef* input);

// Refuses what InputDef asks of its features and files that no format can
// give, naming the field: an unknown input.compression or one on non-TFRecord
// input; decode: RAW_UINT8 or ENCODED_IMAGE on a SPARSE feature or outside
// TFRecord; ENCODED_IMAGE on a shape other than [H, W, C]; a feature scale
// that is not finite and positive, without RAW_UINT8 or ENCODED_IMAGE, or
// with an input.scale other than 1 as well (it would scale twice).
// OpenSource checks it too, for a job that came over the wire.
absl::Status CheckInput(const InputDef& input);

// The compression RecordReader is told for a TFRecord input ("" is AUTO).
// REQUIRES: CheckInput(input) is OK.
Compression TfRecordCompression(const InputDef& input);

// The longest TFRecord record, or CSV or libsvm line, the job reads:
// input.max_record_mb, 64 MiB when unset.
int MaxRecordMb(const InputDef& input);
// The lines of a CSV or libsvm split, each bounded by MaxRecordMb.
LineReader InputLines(const InputDef& input, const DataSource& split);

// Examples in a split (opens and skips through it).
absl::StatusOr<int64_t> CountExamples(const InputDef& input, const DataSource& split);

// Format-specific openers, for OpenSource.
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenCsvSource(const InputDef& input,
                                                             const DataSource& split);
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenLibsvmSource(const InputDef& input,
                                                                const DataSource& split);
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenTfRecordSource(const InputDef& input,
                                                                  const DataSource& split);
absl::StatusOr<std::unique_ptr<ExampleSource>> OpenIdxSource(const InputDef& input,
                                                             const DataSource& split);

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_SOURCE_H_
