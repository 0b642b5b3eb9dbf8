#include "common/snapshot/delta_chain.h"

#include <cstring>
#include <functional>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

using Bad = std::function<absl::Status(absl::string_view)>;

// Rows with their ids, as a hash table or a delta holds them: ids int64
// [n], value and every slot float [n, dim].
absl::Status CheckRows(const VariableState& st, int64_t dim, size_t slots, absl::string_view what, const Bad& bad) {
  if (!st.ids.IsValid() || st.ids.dtype() != DT_INT64 || st.ids.shape().rank() != 1) {
    return bad(absl::StrCat(what, " has no int64 [n] ids"));
  }
  const TensorShape rows({st.ids.NumElements(), dim});
  if (st.value.dtype() != DT_FLOAT || st.value.shape() != rows) {
    return bad(absl::StrCat(what, " value is ", st.value.shape().ToString(), ", expected float32", rows.ToString()));
  }
  if (st.slots.size() != slots) return bad(absl::StrCat(what, " has ", st.slots.size(), " slots, expected ", slots));
  for (const Tensor& s : st.slots) {
    if (s.dtype() != DT_FLOAT || s.shape() != rows) {
      return bad(absl::StrCat(what, " slot is ", s.shape().ToString(), ", expected float32", rows.ToString()));
    }
  }
  return absl::OkStatus();
}

// `rows` rows of `from` (or fewer: the rest left for the caller), in a
// tensor of `rows` rows.
Tensor Resized(const Tensor& from, int64_t rows) {
  const int64_t dim = from.shape().dim(1);
  Tensor out(from.dtype(), TensorShape({rows, dim}));
  std::memcpy(out.raw_data(), from.raw_data(), from.TotalBytes());
  return out;
}

// A fixed table (rows [begin, begin + n) of a variable) with the delta's
// rows, whose ids are row numbers, written over it in place.
absl::StatusOr<VariableState> MergeFixed(VariableState b, const VariableState& d, int64_t dim, const Bad& bad) {
  if (b.def.row_begin() != d.def.row_begin() || b.def.row_end() != d.def.row_end()) {
    return bad("the delta's rows and its base's are of different slices");
  }
  if (b.value.dtype() != DT_FLOAT || b.value.shape().rank() != 2 || b.value.shape().dim(1) != dim) {
    return bad(absl::StrCat("the base value is ", b.value.shape().ToString(), ", not float32 [rows, ", dim, "]"));
  }
  for (const Tensor& t : b.slots) {
    if (t.dtype() != DT_FLOAT || t.shape() != b.value.shape()) return bad("the base's slots and value differ in shape");
  }
  RETURN_IF_ERROR(CheckRows(d, dim, b.slots.size(), "the delta", bad));
  const int64_t begin = b.def.row_end() > 0 ? b.def.row_begin() : 0;
  const int64_t rows = b.value.shape().dim(0);
  std::vector<bool> seen(rows);
  const int64_t* ids = d.ids.data<int64_t>();
  for (int64_t i = 0; i < d.ids.NumElements(); ++i) {
    if (ids[i] < begin || ids[i] - begin >= rows) {
      return bad(absl::StrCat("the delta has row ", ids[i], ", outside the base's [", begin, ", ", begin + rows, ")"));
    }
    if (seen[ids[i] - begin]) return bad(absl::StrCat("the delta holds row ", ids[i], " twice"));
    seen[ids[i] - begin] = true;
  }
  auto scatter = [&](Tensor* into, const Tensor& from) {
    for (int64_t i = 0; i < d.ids.NumElements(); ++i) {
      std::memcpy(into->data<float>() + (ids[i] - begin) * dim, from.data<float>() + i * dim, dim * sizeof(float));
    }
  };
  scatter(&b.value, d.value);
  for (size_t s = 0; s < b.slots.size(); ++s) scatter(&b.slots[s], d.slots[s]);
  b.def = d.def;
  b.updates = d.updates;
  return b;
}

}  // namespace

absl::StatusOr<std::vector<VariableState>> ApplyDelta(std::vector<VariableState> base,
                                                      std::vector<VariableState> delta,
                                                      const std::string& where) {
  std::map<std::string, size_t> in_base;
  for (size_t i = 0; i < base.size(); ++i) in_base[base[i].def.name()] = i;
  std::vector<VariableState> out;
  out.reserve(delta.size());
  for (VariableState& d : delta) {
    if (!d.delta) {
      out.push_back(std::move(d));
      continue;
    }
    const std::string name = d.def.name();
    auto bad = [&](absl::string_view what) {
      return absl::DataLossError(absl::StrCat(where, ": variable ", name, ": ", what));
    };
    auto it = in_base.find(name);
    if (it == in_base.end()) return bad("the delta has rows of it, its base has no such variable");
    VariableState& b = base[it->second];
    if (d.def.shape().dim_size() != 2 || b.def.shape().dim_size() != 2 ||
        d.def.shape().dim(1) != b.def.shape().dim(1)) {
      return bad("the delta's rows and its base's differ in shape");
    }
    const int64_t dim = d.def.shape().dim(1);
    if (b.def.kind() != d.def.kind() || d.def.kind() == VariableDef::DENSE) {
      return bad(absl::StrCat("the delta's rows are of a ", VariableDef::Kind_Name(d.def.kind()), ", its base is a ",
                              VariableDef::Kind_Name(b.def.kind())));
    }
    if (d.def.kind() == VariableDef::FIXED_TABLE) {
      ASSIGN_OR_RETURN(VariableState merged, MergeFixed(std::move(b), d, dim, bad));
      out.push_back(std::move(merged));
      continue;
    }
    RETURN_IF_ERROR(CheckRows(b, dim, b.slots.size(), "the base", bad));
    RETURN_IF_ERROR(CheckRows(d, dim, b.slots.size(), "the delta", bad));
    const int64_t n = b.ids.NumElements();
    const int64_t k = d.ids.NumElements();
    // Where each delta row goes: the base's row of its id, or one appended.
    // The map is of the delta's ids (k, small) and the base's n ids are
    // scanned once (a map of the base's 10M ids made a read 4x slower than
    // a full one's; tests/bench/checkpoint_bench).
    absl::flat_hash_map<int64_t, int64_t> delta_row;
    delta_row.reserve(k);
    const int64_t* delta_ids = d.ids.data<int64_t>();
    for (int64_t i = 0; i < k; ++i) {
      if (!delta_row.emplace(delta_ids[i], i).second) return bad(absl::StrCat("the delta holds id ", delta_ids[i], " twice"));
    }
    std::vector<int64_t> target(k, -1);
    const int64_t* base_ids = b.ids.data<int64_t>();
    for (int64_t i = 0; i < n && !delta_row.empty(); ++i) {
      auto it = delta_row.find(base_ids[i]);
      if (it != delta_row.end()) target[it->second] = i;
    }
    std::vector<int64_t> appended;
    for (int64_t i = 0; i < k; ++i) {
      if (target[i] >= 0) continue;
      target[i] = n + static_cast<int64_t>(appended.size());
      appended.push_back(delta_ids[i]);
    }
    const int64_t total = n + static_cast<int64_t>(appended.size());
    VariableState merged;
    merged.def = d.def;
    merged.updates = d.updates;
    merged.ids = b.ids;
    if (!appended.empty()) {
      merged.ids = Tensor(DT_INT64, TensorShape({total}));
      std::memcpy(merged.ids.raw_data(), b.ids.raw_data(), b.ids.TotalBytes());
      std::memcpy(merged.ids.data<int64_t>() + n, appended.data(), appended.size() * sizeof(int64_t));
    }
    auto scatter = [&](const Tensor& from_base, const Tensor& rows) {
      Tensor t = appended.empty() ? from_base : Resized(from_base, total);
      float* dst = t.data<float>();
      const float* src = rows.data<float>();
      for (int64_t i = 0; i < k; ++i) std::memcpy(dst + target[i] * dim, src + i * dim, dim * sizeof(float));
      return t;
    };
    merged.value = scatter(b.value, d.value);
    for (size_t s = 0; s < d.slots.size(); ++s) merged.slots.push_back(scatter(b.slots[s], d.slots[s]));
    b = VariableState();  // its storage is now the merged one's, or no longer needed
    out.push_back(std::move(merged));
  }
  return out;
}

}  // namespace psrt
