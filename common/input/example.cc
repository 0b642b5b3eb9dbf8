#include "common/input/example.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {

namespace {

// A DENSE feature's batch dims [b, ...shape] and its values per example.
std::vector<int64_t> DenseDims(const FeatureDef& def, int64_t b, int64_t* per) {
  std::vector<int64_t> dims = {b};
  *per = 1;
  for (int64_t d : def.shape()) {
    dims.push_back(d);
    *per *= d;
  }
  return dims;
}

// A DENSE dtype: DT_INT64 feature: each example's ids as the source gave
// them, or its float values where each is an integer a float holds exactly
// (IDX pixels, CSV numbers).
absl::Status IdsBatch(const FeatureDef& def, int f, const std::vector<Example>& examples, Batch* batch) {
  const int64_t b = static_cast<int64_t>(examples.size());
  int64_t per;
  Tensor t(DT_INT64, TensorShape(DenseDims(def, b, &per)));
  int64_t* out = t.data<int64_t>();
  constexpr float kExact = 16777216.0f;  // 2^24: every integer up to it is a float
  for (int64_t i = 0; i < b; ++i) {
    const FeatureValues& v = examples[i].features[f];
    const bool ids = !v.ids.empty() || v.floats.empty();
    const int64_t have = static_cast<int64_t>(ids ? v.ids.size() : v.floats.size());
    if (have != per) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature \"", def.name(), "\" has ", have, " values, its shape needs ", per));
    }
    if (ids) {
      std::copy(v.ids.begin(), v.ids.end(), out + i * per);
      continue;
    }
    for (int64_t k = 0; k < per; ++k) {
      const float x = v.floats[k];
      // Written so NaN fails the test before the cast.
      if (!(x >= -kExact && x <= kExact) || x != std::floor(x)) {
        return absl::InvalidArgumentError(absl::StrCat("feature \"", def.name(), "\" (dtype: DT_INT64): value ", k,
                                                       " of example ", i, " of the batch is ", x,
                                                       ", not an integer id"));
      }
      out[i * per + k] = static_cast<int64_t>(x);
    }
  }
  batch->tensors[def.name()] = std::move(t);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Batch> MakeBatch(const InputDef& input, const std::vector<Example>& examples) {
  Batch batch;
  const int64_t b = static_cast<int64_t>(examples.size());
  batch.size = b;
  const float scale = input.scale() == 0 ? 1.0f : input.scale();
  for (int f = 0; f < input.feature_size(); ++f) {
    const FeatureDef& def = input.feature(f);
    if (def.kind() == FeatureDef::DENSE && def.dtype() == DT_INT64) {
      RETURN_IF_ERROR(IdsBatch(def, f, examples, &batch));
    } else if (def.kind() == FeatureDef::DENSE) {
      int64_t per;
      Tensor t(DT_FLOAT, TensorShape(DenseDims(def, b, &per)));
      float* out = t.data<float>();
      for (int64_t i = 0; i < b; ++i) {
        const auto& v = examples[i].features[f].floats;
        if (static_cast<int64_t>(v.size()) != per) {
          return absl::InvalidArgumentError(absl::StrCat(
              "feature \"", def.name(), "\" has ", v.size(), " values, its shape needs ", per));
        }
        if (scale == 1.0f) {
          std::memcpy(out + i * per, v.data(), per * sizeof(float));
        } else {
          for (int64_t k = 0; k < per; ++k) out[i * per + k] = v[k] * scale;
        }
      }
      batch.tensors[def.name()] = std::move(t);
    } else {
      int64_t nnz = 0;
      bool has_values = false;
      for (const Example& e : examples) {
        nnz += e.features[f].ids.size();
        has_values |= !e.features[f].floats.empty();
      }
      Tensor ids(DT_INT64, TensorShape({nnz}));
      Tensor splits(DT_INT64, TensorShape({b + 1}));
      Tensor values = has_values ? Tensor(DT_FLOAT, TensorShape({nnz})) : Tensor();
      int64_t pos = 0;
      splits.data<int64_t>()[0] = 0;
      for (int64_t i = 0; i < b; ++i) {
        const FeatureValues& fv = examples[i].features[f];
        std::copy(fv.ids.begin(), fv.ids.end(), ids.data<int64_t>() + pos);
        if (has_values) {
          for (size_t k = 0; k < fv.ids.size(); ++k) {
            values.data<float>()[pos + k] = fv.floats.empty() ? 1.0f : fv.floats[k];
          }
        }
        pos += fv.ids.size();
        splits.data<int64_t>()[i + 1] = pos;
      }
      batch.tensors[def.name()] = std::move(ids);
      batch.tensors[RowSplitsKey(def.name())] = std::move(splits);
      if (has_values) batch.tensors[ValuesKey(def.name())] = std::move(values);
    }
  }
  if (input.num_classes() > 0) {
    Tensor label(DT_INT64, TensorShape({b}));
    for (int64_t i = 0; i < b; ++i) {
      float l = examples[i].label;
      // Written so NaN fails the range test before the cast (UB for NaN).
      if (!(l >= 0 && l < input.num_classes()) || l != static_cast<int64_t>(l)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "label ", l, " is not a class index in [0, ", input.num_classes(), ")"));
      }
      label.data<int64_t>()[i] = static_cast<int64_t>(l);
    }
    batch.tensors[kLabelKey] = std::move(label);
  } else {
    Tensor label(DT_FLOAT, TensorShape({b}));
    for (int64_t i = 0; i < b; ++i) label.data<float>()[i] = examples[i].label;
    batch.tensors[kLabelKey] = std::move(label);
  }
  return batch;
}

}  // namespace psrt
