#include "common/store/restore_assembly.h"

#include <cstring>
#include <map>

#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/store/variable.h"

namespace psrt {
namespace {

// Rows [begin, end) of the whole variable a definition holds.
std::pair<int64_t, int64_t> RowsOf(const VariableDef& def, int64_t total_rows) {
  if (def.row_begin() == 0 && def.row_end() == 0) return {0, total_rows};
  return {def.row_begin(), def.row_end()};
}

using Pieces = std::pair<std::multimap<std::string, const VariableState*>::const_iterator,
                         std::multimap<std::string, const VariableState*>::const_iterator>;

// Our shard of a hash table: every piece's rows whose id routes here, in
// the order the pieces list them, an id seen twice (replicas) taken once.
absl::StatusOr<VariableState> AssembleHashTable(const VariableDef& def, int num_slots, Pieces pieces) {
  if (def.shape().dim_size() != 2 || def.shape().dim(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(def.name(), ": a hash table is [any, dim]"));
  }
  const int64_t dim = def.shape().dim(1);
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  VariableState st;
  st.def = def;
  std::vector<int64_t> ids;
  std::vector<std::vector<char>> rows(1 + num_slots);  // value, then each slot
  absl::flat_hash_set<int64_t> seen;
  bool any = false;
  for (auto it = pieces.first; it != pieces.second; ++it) {
    const VariableState& p = *it->second;
    if (p.def.kind() != VariableDef::HASH_TABLE || p.def.dtype() != def.dtype() || p.def.shape().dim_size() != 2 ||
        p.def.shape().dim(1) != dim) {
      return absl::FailedPreconditionError(absl::StrCat(
          def.name(), ": the checkpoint holds it with another kind, dtype or row width (another model?)"));
    }
    if (p.slots.size() != static_cast<size_t>(num_slots)) {
      return absl::FailedPreconditionError(absl::StrCat(def.name(), ": the checkpoint has ", p.slots.size(),
                                                        " optimizer slots, the job's optimizer ", num_slots));
    }
    const int64_t n = p.ids.NumElements();
    bool fits = p.ids.dtype() == DT_INT64 && p.ids.shape().rank() == 1 && p.value.dtype() == DT_FLOAT &&
                p.value.NumElements() == n * dim;
    for (const Tensor& t : p.slots) fits = fits && t.dtype() == DT_FLOAT && t.NumElements() == n * dim;
    if (!fits) {
      return absl::DataLossError(absl::StrCat(def.name(), ": a piece of ", n, " ids does not have [", n, ", ",
                                              dim, "] values and slots"));
    }
    any = true;
    // Adam's bias correction counts updates per shard; the shards of one
    // table see nearly the same pushes, and the most advanced count is the
    // one its rows' moments were last corrected with.
    st.updates = std::max(st.updates, p.updates);
    const int64_t* pid = p.ids.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (HashShardOf(pid[i], def.hash_shards()) != def.hash_shard() || !seen.insert(pid[i]).second) continue;
      ids.push_back(pid[i]);
      const size_t from = static_cast<size_t>(i) * row_bytes;
      for (int k = 0; k <= num_slots; ++k) {
        const char* src = static_cast<const char*>(k == 0 ? p.value.raw_data() : p.slots[k - 1].raw_data()) + from;
        rows[k].insert(rows[k].end(), src, src + row_bytes);
      }
    }
  }
  if (!any) return absl::DataLossError(absl::StrCat("the checkpoint lacks hash table ", def.name()));
  const TensorShape shape({static_cast<int64_t>(ids.size()), dim});
  st.ids = Tensor::FromVector<int64_t>(ids, TensorShape({static_cast<int64_t>(ids.size())}));
  for (int k = 0; k <= num_slots; ++k) {
    Tensor t(DT_FLOAT, shape);
    if (!rows[k].empty()) std::memcpy(t.raw_data(), rows[k].data(), rows[k].size());
    if (k == 0) {
      st.value = std::move(t);
    } else {
      st.slots.push_back(std::move(t));
    }
  }
  return st;
}

}  // namespace

absl::StatusOr<std::vector<VariableState>> AssembleVariables(const std::vector<VariableDef>& wanted,
                                                             int optimizer_slots,
                                                             const std::vector<PsSnapshot>& sources) {
  std::multimap<std::string, const VariableState*> pieces;
  for (const PsSnapshot& snap : sources) {
    for (const VariableState& st : snap.variables) pieces.emplace(st.def.name(), &st);
  }
  std::vector<VariableState> out;
  for (const VariableDef& def : wanted) {
    const int num_slots = SlotsOf(def, optimizer_slots);  // none for a moving average
    if (def.kind() == VariableDef::HASH_TABLE) {
      ASSIGN_OR_RETURN(VariableState table, AssembleHashTable(def, num_slots, pieces.equal_range(def.name())));
      out.push_back(std::move(table));
      continue;
    }
    ASSIGN_OR_RETURN(TensorShape whole, TensorShape::FromProto(def.shape()));
    if (whole.rank() < 1) whole = TensorShape({1});  // a scalar: one row
    const int64_t total = whole.dim(0);
    const auto [begin, end] = RowsOf(def, total);
    if (begin < 0 || end > total || begin > end) {
      return absl::InvalidArgumentError(absl::StrCat(def.name(), ": rows [", begin, ", ", end, ") of ", total));
    }
    std::vector<int64_t> dims = whole.dims();
    dims[0] = end - begin;
    TensorShape mine(dims);
    const size_t row_bytes = static_cast<size_t>(whole.row_elements()) * sizeof(float);
    VariableState st;
    st.def = def;
    st.value = Tensor::Zeros(DT_FLOAT, mine);
    for (int s = 0; s < num_slots; ++s) st.slots.push_back(Tensor::Zeros(DT_FLOAT, mine));
    std::vector<char> covered(static_cast<size_t>(end - begin), 0);
    int64_t missing = end - begin;
    bool first = true;
    auto range = pieces.equal_range(def.name());
    for (auto it = range.first; it != range.second && missing > 0; ++it) {
      const VariableState& p = *it->second;
      if (p.def.kind() != def.kind() || p.def.dtype() != def.dtype() ||
          p.def.shape().SerializeAsString() != def.shape().SerializeAsString()) {
        return absl::FailedPreconditionError(absl::StrCat(
            def.name(), ": the checkpoint holds it with another kind, dtype or shape (another model?)"));
      }
      if (p.slots.size() != static_cast<size_t>(num_slots)) {
        return absl::FailedPreconditionError(absl::StrCat(def.name(), ": the checkpoint has ", p.slots.size(),
                                                          " optimizer slots, the job's optimizer ", num_slots));
      }
      const auto [pb, pe] = RowsOf(p.def, total);
      std::vector<int64_t> pdims = whole.dims();
      pdims[0] = pe - pb;
      const TensorShape theirs(pdims);
      // Element counts, not shapes: a scalar is stored as [] and seen here as [1].
      bool fits = p.value.dtype() == DT_FLOAT && p.value.NumElements() == theirs.num_elements();
      for (const Tensor& t : p.slots) fits = fits && t.dtype() == DT_FLOAT && t.NumElements() == theirs.num_elements();
      if (!fits) {
        return absl::DataLossError(absl::StrCat(def.name(), ": a piece of rows [", pb, ", ", pe,
                                                ") does not have their shape"));
      }
      if (first) st.updates = p.updates;
      first = false;
      for (int64_t r = std::max(begin, pb); r < std::min(end, pe); ++r) {
        if (covered[r - begin]) continue;
        covered[r - begin] = 1;
        --missing;
        const size_t to = static_cast<size_t>(r - begin) * row_bytes, from = static_cast<size_t>(r - pb) * row_bytes;
        std::memcpy(static_cast<char*>(st.value.raw_data()) + to, static_cast<const char*>(p.value.raw_data()) + from,
                    row_bytes);
        for (int s = 0; s < num_slots; ++s) {
          std::memcpy(static_cast<char*>(st.slots[s].raw_data()) + to,
                      static_cast<const char*>(p.slots[s].raw_data()) + from, row_bytes);
        }
      }
    }
    if (missing > 0 && missing == end - begin) {
      // Not one row anywhere: the variable is not the checkpoint's at all.
      return absl::DataLossError(
          absl::StrCat("the checkpoint has no variable ", def.name(), " (another model's checkpoint?)"));
    }
    if (missing > 0) {
      int64_t r = 0;
      while (covered[r]) ++r;
      return absl::DataLossError(absl::StrCat("the checkpoint lacks ", missing, " rows of ", def.name(),
                                              " (first: row ", begin + r, ")"));
    }
    // A scalar keeps its own shape.
    if (TensorShape::FromProto(def.shape())->rank() == 0) {
      ASSIGN_OR_RETURN(st.value, st.value.Reshape(TensorShape()));
      for (Tensor& t : st.slots) {
        ASSIGN_OR_RETURN(t, t.Reshape(TensorShape()));
      }
    }
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace psrt
