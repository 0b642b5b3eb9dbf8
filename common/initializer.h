// Variable initializers, seeded per (seed, variable name, row), so that the
// same row of the same variable gets the same values on any process: a
// partitioned variable's shards, a hash-table row made on first touch, and
// the in-process trainer all agree.
#ifndef PSRT_COMMON_INITIALIZER_H_
#define PSRT_COMMON_INITIALIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

// Fills `out` with rows [row_begin, row_end) of a variable of `full_shape`
// (rows are dim 0; a row holds full_shape.row_elements() floats). For a hash
// table, rows are ids and full_shape[0] is ignored. DEFAULT means Glorot
// uniform for rank >= 2 and zeros otherwise. Refuses bad parameters (a
// uniform range with maxval < minval, a negative stddev).
absl::Status InitializeRows(const InitializerDef& def, const TensorShape& full_shape,
                            uint64_t seed, absl::string_view variable_name, int64_t row_begin,
                            int64_t row_end, float* out);

// One row, for hash tables: `id` is the row.
inline absl::Status InitializeRow(const InitializerDef& def, const TensorShape& full_shape,
                                  uint64_t seed, absl::string_view variable_name, int64_t id,
                                  float* out) {
  return InitializeRows(def, full_shape, seed, variable_name, id, id + 1, out);
}

// Glorot's fan-in and fan-out: [in, out] for matrices, kh*kw*cin and
// kh*kw*cout for [kh, kw, cin, cout] kernels.
void FanInOut(const TensorShape& shape, double* fan_in, double* fan_out);

}  // namespace psrt

#endif  // PSRT_COMMON_INITIALIZER_H_
