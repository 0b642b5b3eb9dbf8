#include "common/initializer.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

uint64_t RowSeed(uint64_t seed, absl::string_view name, int64_t row) {
  // absl::Hash is salted per process; a fixed mix is not.
  uint64_t h = 1469598103934665603ull ^ seed;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  h ^= static_cast<uint64_t>(row) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

// TENSOR: rows [row_begin, row_end) of def.tensor, which must be float and
// shaped as the whole variable (checked here: the definition may come from
// a peer).
absl::Status CopyTensorRows(const InitializerDef& def, const TensorShape& full_shape,
                            absl::string_view variable_name, int64_t row_begin, int64_t row_end,
                            float* out) {
  auto bad = [&](absl::string_view what) {
    // Callers that ignore the status (a hash table's new row) get zeros,
    // never uninitialised memory.
    if (row_end > row_begin && full_shape.rank() > 0) {
      std::fill(out, out + (row_end - row_begin) * full_shape.row_elements(), 0.0f);
    }
    return absl::InvalidArgumentError(absl::StrCat("initializer for ", variable_name, ": ", what));
  };
  const TensorProto& t = def.tensor();
  if (t.dtype() != DT_FLOAT) return bad("the initial tensor is not float");
  if (t.shape().dim_size() != full_shape.rank()) {
    return bad(absl::StrCat("the initial tensor has rank ", t.shape().dim_size(), ", the variable is ",
                            full_shape.ToString()));
  }
  for (int i = 0; i < full_shape.rank(); ++i) {
    if (t.shape().dim(i) != full_shape.dim(i)) {
      return bad(absl::StrCat("the initial tensor's dim ", i, " is ", t.shape().dim(i), ", the variable is ",
                              full_shape.ToString()));
    }
  }
  const int64_t rows = full_shape.rank() == 0 ? 1 : full_shape.dim(0);
  const int64_t row = full_shape.rank() == 0 ? 1 : full_shape.row_elements();
  if (t.content().size() % sizeof(float) != 0 ||
      static_cast<int64_t>(t.content().size() / sizeof(float)) != full_shape.num_elements()) {
    return bad(absl::StrCat("the initial tensor has ", t.content().size(), " bytes for ", full_shape.ToString()));
  }
  if (row_begin < 0 || row_end < row_begin || row_end > rows) {
    return bad(absl::StrCat("rows [", row_begin, ", ", row_end, ") are outside ", full_shape.ToString()));
  }
  std::memcpy(out, t.content().data() + row_begin * row * sizeof(float), (row_end - row_begin) * row * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

void FanInOut(const TensorShape& shape, double* fan_in, double* fan_out) {
  if (shape.rank() < 2) {
    *fan_in = *fan_out = shape.rank() == 1 ? shape.dim(0) : 1;
    return;
  }
  double receptive = 1;
  for (int i = 0; i + 2 < shape.rank(); ++i) receptive *= shape.dim(i);
  *fan_in = receptive * shape.dim(shape.rank() - 2);
  *fan_out = receptive * shape.dim(shape.rank() - 1);
}

absl::Status InitializeRows(const InitializerDef& def, const TensorShape& full_shape, uint64_t seed,
                            absl::string_view variable_name, int64_t row_begin, int64_t row_end,
                            float* out) {
  const int64_t row = full_shape.rank() == 0 ? 1 : full_shape.row_elements();
  const int64_t n = (row_end - row_begin) * row;
  InitializerDef::Kind kind = def.kind();
  if (kind == InitializerDef::TENSOR) {
    return CopyTensorRows(def, full_shape, variable_name, row_begin, row_end, out);
  }
  if (kind == InitializerDef::DEFAULT) {
    kind = full_shape.rank() >= 2 ? InitializerDef::GLOROT_UNIFORM : InitializerDef::ZEROS;
  }
  double fan_in, fan_out;
  FanInOut(full_shape, &fan_in, &fan_out);
  if (kind == InitializerDef::UNIFORM && def.maxval() < def.minval()) {
    return absl::InvalidArgumentError(absl::StrCat("initializer for ", variable_name, ": maxval ",
                                                   def.maxval(), " < minval ", def.minval()));
  }
  if (kind == InitializerDef::TRUNCATED_NORMAL && def.stddev() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer for ", variable_name, ": negative stddev"));
  }
  // Rows of no elements: nothing to draw. Without this, shape [2^40, 0]
  // seeded a generator per empty row for hours (found by
  // tests/fuzz/ps_request_fuzzer through CreateVariables).
  if (n == 0) return absl::OkStatus();
  switch (kind) {
    case InitializerDef::ZEROS:
      std::fill(out, out + n, 0.0f);
      return absl::OkStatus();
    case InitializerDef::ONES:
      std::fill(out, out + n, 1.0f);
      return absl::OkStatus();
    case InitializerDef::CONSTANT:
      std::fill(out, out + n, def.value());
      return absl::OkStatus();
    default:
      break;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    std::mt19937_64 rng(RowSeed(seed, variable_name, r));
    float* o = out + (r - row_begin) * row;
    // A normal truncated at two standard deviations, as TensorFlow draws it.
    auto truncated = [&](double mean, double stddev) {
      std::normal_distribution<double> nd(0.0, 1.0);
      double x;
      do {
        x = nd(rng);
      } while (std::fabs(x) > 2.0);
      return static_cast<float>(mean + stddev * x);
    };
    for (int64_t i = 0; i < row; ++i) {
      switch (kind) {
        case InitializerDef::UNIFORM: {
          std::uniform_real_distribution<double> u(def.minval(), def.maxval());
          o[i] = static_cast<float>(u(rng));
          break;
        }
        case InitializerDef::TRUNCATED_NORMAL:
          o[i] = truncated(def.mean(), def.stddev() > 0 ? def.stddev() : 0.05);
          break;
        case InitializerDef::GLOROT_NORMAL:
          // 0.8796 undoes the truncation's shrinking of the variance.
          o[i] = truncated(0.0, std::sqrt(2.0 / (fan_in + fan_out)) / 0.87962566103423978);
          break;
        default: {  // GLOROT_UNIFORM
          double limit = std::sqrt(6.0 / (fan_in + fan_out));
          std::uniform_real_distribution<double> u(-limit, limit);
          o[i] = static_cast<float>(u(rng));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace psrt
