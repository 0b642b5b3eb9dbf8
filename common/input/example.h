// One example and one batch, as the input pipeline hands them to the
// trainer. Features follow the order of InputDef.feature.
//
// In a Batch, a DENSE feature "image" of per-example shape [28,28,1] is a
// float tensor [B,28,28,1]; a SPARSE feature "ids" is two int64 tensors,
// "ids" [nnz] and "ids:row_splits" [B+1] (example b owns ids
// [row_splits[b], row_splits[b+1])), plus "ids:values" float [nnz] where the
// format carries a value per id (libsvm). A DENSE feature of dtype: DT_INT64
// is an int64 tensor [B, ...shape] of ids (unscaled). The label is "label": int64 [B]
// when InputDef.num_classes > 0, else float [B].
#ifndef PSRT_COMMON_INPUT_EXAMPLE_H_
#define PSRT_COMMON_INPUT_EXAMPLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

struct FeatureValues {
  std::vector<float> floats;  // DENSE values, or SPARSE per-id values (may be empty)
  std::vector<int64_t> ids;   // SPARSE ids
};

struct Example {
  std::vector<FeatureValues> features;  // one per InputDef.feature
  float label = 0;
};

struct Batch {
  std::map<std::string, Tensor> tensors;
  int64_t size = 0;
  int epoch = 0;  // of the batch's first example
};

inline constexpr char kLabelKey[] = "label";
inline std::string RowSplitsKey(const std::string& feature) { return feature + ":row_splits"; }
inline std::string ValuesKey(const std::string& feature) { return feature + ":values"; }

// Builds a batch from examples, multiplying DENSE float values by
// InputDef.scale; refuses a DENSE feature whose value count does not match
// its shape, or an id feature's value that is not an integer, naming the
// feature.
absl::StatusOr<Batch> MakeBatch(const InputDef& input, const std::vector<Example>& examples);

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_EXAMPLE_H_
