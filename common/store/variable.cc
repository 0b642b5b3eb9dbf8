#include "common/store/variable.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

constexpr int64_t kInitialHashRows = 1024;

absl::Status Bad(const VariableDef& def, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("variable ", def.name(), ": ", what));
}

std::string HashShardText(const VariableDef& def) {
  if (def.hash_shards() == 0) return "";
  return absl::StrCat(", hash shard ", def.hash_shard(), " of ", def.hash_shards());
}

// fn(begin, end) over [0, units) in one part, or with a pool in parts of
// at least Variable::kMinPartElements elements on its threads.
void InParts(WorkPool* pool, int64_t units, int64_t unit_elements, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t parts = pool == nullptr ? 1 : pool->Parts(units * unit_elements, Variable::kMinPartElements);
  if (parts == 1) {
    fn(0, units);
    return;
  }
  pool->ParallelFor(parts, [&](int64_t p) { fn(units * p / parts, units * (p + 1) / parts); });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Variable>> Variable::Create(const VariableDef& def, const Optimizer* optimizer) {
  return Create(def, optimizer, VariableLimits());
}

absl::StatusOr<std::unique_ptr<Variable>> Variable::Create(const VariableDef& def, const Optimizer* optimizer,
                                                           const VariableLimits& limits) {
  if (def.name().empty()) return absl::InvalidArgumentError("variable with no name");
  if (def.dtype() != DT_FLOAT) {
    return Bad(def, absl::StrCat("dtype ", DataTypeName(def.dtype()), " (only float32 is trained)"));
  }
  ASSIGN_OR_RETURN(TensorShape full, TensorShape::FromProto(def.shape()));
  if (def.kind() != VariableDef::DENSE && full.rank() != 2) {
    return Bad(def, absl::StrCat("an embedding table is [rows, dim], not ", full.ToString()));
  }
  std::vector<int64_t> dims = full.dims();
  if (def.hash_shards() < 0 || def.hash_shard() < 0 ||
      (def.hash_shards() == 0 ? def.hash_shard() != 0 : def.hash_shard() >= def.hash_shards())) {
    return Bad(def, absl::StrCat("hash shard ", def.hash_shard(), " of ", def.hash_shards(),
                                 " (want 0 <= hash_shard < hash_shards, or both 0)"));
  }
  if (def.kind() != VariableDef::HASH_TABLE && def.hash_shards() != 0) {
    return Bad(def, "hash_shard/hash_shards are for a HASH_TABLE");
  }
  if (def.has_moving_average()) {
    // The value of a peer's request: NaN or out of range would corrupt the
    // statistic at every step.
    const float m = def.moving_average().momentum();
    if (!(m >= 0.0f && m <= 1.0f)) {
      return Bad(def, absl::StrCat("moving_average.momentum ", m, " is not in [0, 1]"));
    }
    if (def.kind() != VariableDef::DENSE) return Bad(def, "a moving average is a DENSE variable, not a table");
  }
  if (def.kind() == VariableDef::HASH_TABLE) {
    dims[0] = 0;
  } else if (def.row_begin() != 0 || def.row_end() != 0) {
    if (full.rank() == 0 || def.row_begin() < 0 || def.row_end() <= def.row_begin() || def.row_end() > full.dim(0)) {
      return Bad(def, absl::StrCat("row slice [", def.row_begin(), ", ", def.row_end(), ") does not fit shape ",
                                   full.ToString()));
    }
    dims[0] = def.row_end() - def.row_begin();
  }
  // The request is from the network: refuse a shape whose bytes do not
  // even fit 64 bits (float32 [2^62, 1] wrapped to 0 bytes and the
  // initializer wrote past the end of an empty buffer).
  unsigned __int128 bytes = sizeof(float);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = def.kind() == VariableDef::HASH_TABLE && i == 0 ? kInitialHashRows : dims[i];
    bytes *= static_cast<uint64_t>(d);
    if (bytes >> 62) {
      return Bad(def, absl::StrCat("shape ", full.ToString(), " is too large"));
    }
  }
  // Value plus optimizer slots, against what this PS has left.
  const int num_slots = SlotsOf(def, optimizer->num_slots());
  const unsigned __int128 needed = bytes * static_cast<unsigned>(1 + num_slots);
  if (needed > static_cast<unsigned __int128>(limits.max_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "variable ", def.name(), " ", full.ToString(), " needs ", static_cast<uint64_t>(needed), " bytes with its ",
        num_slots, " optimizer slots; this PS has ", limits.max_bytes, " bytes left (--max_memory_mb)"));
  }
  auto v = std::unique_ptr<Variable>(new Variable(def, TensorShape(dims), optimizer));
  v->max_hash_rows_ = limits.max_hash_rows;
  if (def.kind() == VariableDef::HASH_TABLE && limits.max_hash_rows == INT64_MAX && limits.max_bytes != INT64_MAX) {
    // No row limit of its own: as many rows as the memory limit holds, so
    // a flood of new ids cannot grow a table without bound by default.
    const int64_t row_bytes = static_cast<int64_t>(needed / kInitialHashRows);
    v->max_hash_rows_ = limits.max_bytes / std::max<int64_t>(1, row_bytes);
  }
  absl::MutexLock lock(&v->mu_);
  if (def.kind() == VariableDef::HASH_TABLE) {
    v->GrowLocked(kInitialHashRows);
    return v;
  }
  v->value_ = Tensor(DT_FLOAT, v->shape_);
  int64_t begin = def.row_end() > 0 ? def.row_begin() : 0;
  int64_t rows = full.rank() == 0 ? 1 : v->shape_.dim(0);
  RETURN_IF_ERROR(
      InitializeRows(def.initializer(), full, def.seed(), def.name(), begin, begin + rows, v->value_.data<float>()));
  if (def.kind() == VariableDef::FIXED_TABLE) v->touched_.assign(rows, 0);
  for (int i = 0; i < num_slots; ++i) {
    Tensor s(DT_FLOAT, v->shape_);
    s.flat<float>().setConstant(optimizer->slot_initial_value(i));
    v->slots_.push_back(std::move(s));
  }
  return v;
}

namespace {

VariableDef WithoutInitialTensor(const VariableDef& def) {
  if (!def.initializer().has_tensor()) return def;
  VariableDef out = def;
  out.mutable_initializer()->clear_tensor();
  return out;
}

}  // namespace

Variable::Variable(const VariableDef& def, TensorShape shape, const Optimizer* optimizer)
    : def_(def),
      snapshot_def_(WithoutInitialTensor(def)),
      shape_(std::move(shape)),
      row_elements_(shape_.rank() == 0 ? 1 : shape_.row_elements()),
      optimizer_(optimizer) {}

absl::Status Variable::SameAs(const VariableDef& other) const {
  if (other.kind() != def_.kind() || other.dtype() != def_.dtype() ||
      other.shape().SerializeAsString() != def_.shape().SerializeAsString() || other.row_begin() != def_.row_begin() ||
      other.row_end() != def_.row_end() || other.hash_shard() != def_.hash_shard() ||
      other.hash_shards() != def_.hash_shards()) {
    ASSIGN_OR_RETURN(TensorShape theirs, TensorShape::FromProto(other.shape()));
    ASSIGN_OR_RETURN(TensorShape ours, TensorShape::FromProto(def_.shape()));
    return Bad(
        def_, absl::StrCat("exists as ", VariableDef::Kind_Name(def_.kind()), " ", ours.ToString(), " rows [",
                           def_.row_begin(), ",", def_.row_end(), "), asked for ", VariableDef::Kind_Name(other.kind()),
                           " ", theirs.ToString(), " rows [", other.row_begin(), ",", other.row_end(), ")",
                           HashShardText(other), " (ours", HashShardText(def_), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Variable::Read() const {
  if (def_.kind() == VariableDef::HASH_TABLE) {
    return Bad(def_, "a hash table is read by rows (PullRows), not whole");
  }
  absl::ReaderMutexLock lock(&mu_);
  return value_;  // shared; see UnshareLocked
}

void Variable::UnshareLocked() {
  // Reads take their reference under the reader lock, so while we hold the
  // writer lock the count can only fall: at worst we copy when the last
  // reader is just letting go.
  if (value_.buffer().use_count() > 1) value_ = value_.Copy();
}

absl::Status Variable::ApplyDense(const Tensor& grad, WorkPool* pool) {
  if (def_.kind() == VariableDef::HASH_TABLE) return Bad(def_, "a hash table takes row gradients");
  if (grad.dtype() != DT_FLOAT || grad.shape() != shape_) {
    return Bad(def_, absl::StrCat("gradient is ", DataTypeName(grad.dtype()), grad.shape().ToString(),
                                  ", the variable is float32", shape_.ToString()));
  }
  absl::MutexLock lock(&mu_);
  UnshareLocked();
  const int64_t t = ++updates_;
  float* var = value_.data<float>();
  const float* g = grad.data<float>();
  std::vector<float*> slots;
  for (Tensor& s : slots_) slots.push_back(s.data<float>());
  // A moving average takes a value, not a gradient: assigned, not trained.
  const bool assign = def_.has_moving_average();
  const float momentum = def_.moving_average().momentum();
  // Every rule is element-wise: a range gets exactly the arithmetic it
  // would in one pass. The writer lock is held until every range is done.
  // Ranges are whole 64-byte lines of the (64-byte-aligned) storage, so
  // each one's vector loop lines up as the single pass's would.
  constexpr int64_t kLine = 16;
  const int64_t n = value_.NumElements();
  InParts(pool, (n + kLine - 1) / kLine, kLine, [&](int64_t first_line, int64_t end_line) {
    const int64_t begin = first_line * kLine, end = std::min(n, end_line * kLine);
    std::vector<float*> at(slots.size());
    for (size_t k = 0; k < slots.size(); ++k) at[k] = slots[k] + begin;
    if (assign) {
      for (int64_t i = begin; i < end; ++i) var[i] = momentum * var[i] + (1.0f - momentum) * g[i];
      return;
    }
    optimizer_->Apply(var + begin, g + begin, end - begin, at.data(), t);
  });
  return absl::OkStatus();
}

absl::Status Variable::CheckIds(const Tensor& ids) const {
  if (def_.kind() == VariableDef::DENSE) return Bad(def_, "a dense variable has no rows to pull");
  if (ids.dtype() != DT_INT64 || ids.shape().rank() != 1) {
    return Bad(def_, absl::StrCat("ids must be int64 [n], got ", DataTypeName(ids.dtype()), ids.shape().ToString()));
  }
  if (def_.kind() == VariableDef::FIXED_TABLE) {
    int64_t begin = def_.row_end() > 0 ? def_.row_begin() : 0;
    int64_t end = begin + shape_.dim(0);
    for (int64_t id : ids.span<int64_t>()) {
      if (id < begin || id >= end) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable ", def_.name(), ": id ", id, " is out of range [", begin, ", ", end, ")"));
      }
    }
  }
  return absl::OkStatus();
}

void Variable::GrowLocked(int64_t rows) {
  int64_t dim = def_.shape().dim(1);
  int64_t used = static_cast<int64_t>(ids_.size());
  // Only the rows made so far are copied; the rest of the capacity is left
  // unwritten (RowOfLocked writes each row as it makes it), so its pages
  // are never touched and cost no memory until used: a table's resident
  // size follows its rows, not the doubled capacity (issue #26 measured
  // 2.2x the raw bytes per row when the capacity was filled here).
  auto grow = [&](Tensor* t) {
    Tensor bigger(DT_FLOAT, TensorShape({rows, dim}));
    if (t->IsValid()) std::memcpy(bigger.raw_data(), t->raw_data(), used * dim * sizeof(float));
    *t = std::move(bigger);
  };
  grow(&value_);
  touched_.resize(rows, 0);
  slots_.resize(optimizer_->num_slots());
  for (int i = 0; i < optimizer_->num_slots(); ++i) grow(&slots_[i]);
}

absl::Status Variable::CheckRoomLocked(const int64_t* ids, int64_t n) const {
  if (def_.kind() != VariableDef::HASH_TABLE || max_hash_rows_ == INT64_MAX) return absl::OkStatus();
  const int64_t made = static_cast<int64_t>(ids_.size());
  if (made + n <= max_hash_rows_) return absl::OkStatus();  // even if every id is new
  absl::flat_hash_set<int64_t> fresh;
  for (int64_t i = 0; i < n; ++i) {
    if (!index_.contains(ids[i])) fresh.insert(ids[i]);
  }
  if (made + static_cast<int64_t>(fresh.size()) > max_hash_rows_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("variable ", def_.name(), ": ", fresh.size(), " new ids would make ", made + fresh.size(),
                     " rows, over the limit of ", max_hash_rows_, " (--max_hash_table_rows)"));
  }
  return absl::OkStatus();
}

absl::Status Variable::CheckRoom(const Tensor& ids) const {
  RETURN_IF_ERROR(CheckIds(ids));
  absl::ReaderMutexLock lock(&mu_);
  return CheckRoomLocked(ids.data<int64_t>(), ids.NumElements());
}

int64_t Variable::RowOfLocked(int64_t id) {
  if (def_.kind() == VariableDef::FIXED_TABLE) return id - (def_.row_end() > 0 ? def_.row_begin() : 0);
  auto it = index_.find(id);
  if (it != index_.end()) return it->second;
  int64_t row = static_cast<int64_t>(ids_.size());
  if (row == value_.shape().dim(0)) GrowLocked(2 * row);
  ids_.push_back(id);
  index_.emplace(id, row);
  TouchLocked(row);
  int64_t dim = def_.shape().dim(1);
  // The initializer was checked when the variable was made.
  (void)InitializeRow(def_.initializer(), TensorShape({0, dim}), def_.seed(), def_.name(), id,
                      value_.data<float>() + row * dim);
  for (int i = 0; i < optimizer_->num_slots(); ++i) {
    float* slot = slots_[i].data<float>() + row * dim;
    std::fill(slot, slot + dim, optimizer_->slot_initial_value(i));
  }
  return row;
}

absl::StatusOr<Tensor> Variable::ReadRows(const Tensor& ids, BufferPool* pool, bool make_rows) {
  RETURN_IF_ERROR(CheckIds(ids));
  const int64_t n = ids.NumElements();
  const int64_t dim = def_.shape().dim(1);
  TensorShape shape({n, dim});
  Tensor out =
      pool != nullptr ? Tensor(DT_FLOAT, shape, pool->Allocate(n * dim * sizeof(float))) : Tensor(DT_FLOAT, shape);
  if (!make_rows && def_.kind() == VariableDef::HASH_TABLE) {
    absl::ReaderMutexLock lock(&mu_);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids.data<int64_t>()[i];
      float* row = out.data<float>() + i * dim;
      auto it = index_.find(id);
      if (it != index_.end()) {
        std::memcpy(row, value_.data<float>() + it->second * dim, dim * sizeof(float));
      } else {
        // What RowOfLocked would make (the initializer was checked when
        // the variable was made).
        (void)InitializeRow(def_.initializer(), TensorShape({0, dim}), def_.seed(), def_.name(), id, row);
      }
    }
    return out;
  }
  absl::MutexLock lock(&mu_);  // a hash table may grow
  RETURN_IF_ERROR(CheckRoomLocked(ids.data<int64_t>(), n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t row = RowOfLocked(ids.data<int64_t>()[i]);
    std::memcpy(out.data<float>() + i * dim, value_.data<float>() + row * dim, dim * sizeof(float));
  }
  return out;
}

absl::Status Variable::ApplyRows(const Tensor& ids, const Tensor& grads, WorkPool* pool) {
  RETURN_IF_ERROR(CheckIds(ids));
  const int64_t n = ids.NumElements();
  const int64_t dim = def_.shape().dim(1);
  if (grads.dtype() != DT_FLOAT || grads.shape() != TensorShape({n, dim})) {
    return Bad(def_, absl::StrCat("row gradients must be float32[", n, ",", dim, "], got ", DataTypeName(grads.dtype()),
                                  grads.shape().ToString()));
  }
  // Sum the gradients of repeated ids, so each row gets one update. The
  // usual case (ids already unique, as workers send them) reads the
  // gradients in place; only repeats are summed into a copy.
  const int64_t* id_data = ids.data<int64_t>();
  const float* grad_data = grads.data<float>();
  absl::flat_hash_map<int64_t, int64_t> first;
  first.reserve(n);
  std::vector<int64_t> unique;
  unique.reserve(n);
  std::vector<const float*> source;  // the gradient row of each unique id
  source.reserve(n);
  std::vector<std::vector<float>> sums;         // for ids seen more than once
  absl::flat_hash_map<int64_t, size_t> sum_of;  // unique index -> sums index
  for (int64_t i = 0; i < n; ++i) {
    auto [it, inserted] = first.emplace(id_data[i], static_cast<int64_t>(unique.size()));
    if (inserted) {
      unique.push_back(id_data[i]);
      source.push_back(grad_data + i * dim);
      continue;
    }
    const int64_t u = it->second;
    auto [sit, fresh] = sum_of.emplace(u, sums.size());
    if (fresh) {
      sums.emplace_back(source[u], source[u] + dim);
      source[u] = sums.back().data();
    }
    // (A vector keeps its buffer when `sums` grows and moves it.)
    float* acc = sums[sit->second].data();
    for (int64_t k = 0; k < dim; ++k) acc[k] += grad_data[i * dim + k];
  }
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckRoomLocked(unique.data(), static_cast<int64_t>(unique.size())));
  UnshareLocked();
  const int64_t t = ++updates_;
  // Rows first (a hash table may grow and move its storage), then the
  // updates: the ids are unique, so ranges of them touch disjoint rows.
  std::vector<int64_t> row_of(unique.size());
  for (size_t u = 0; u < unique.size(); ++u) {
    row_of[u] = RowOfLocked(unique[u]);
    TouchLocked(row_of[u]);  // for the next incremental checkpoint
  }
  float* var = value_.data<float>();
  std::vector<float*> slots;
  for (Tensor& s : slots_) slots.push_back(s.data<float>());
  InParts(pool, static_cast<int64_t>(unique.size()), dim, [&](int64_t begin, int64_t end) {
    std::vector<float*> slot_rows(slots.size());
    for (int64_t u = begin; u < end; ++u) {
      const int64_t at = row_of[u] * dim;
      for (size_t s = 0; s < slots.size(); ++s) slot_rows[s] = slots[s] + at;
      optimizer_->Apply(var + at, source[u], dim, slot_rows.data(), t);
    }
  });
  return absl::OkStatus();
}

int64_t Variable::bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  int64_t rows = def_.kind() == VariableDef::HASH_TABLE ? static_cast<int64_t>(ids_.size()) : -1;
  int64_t per = static_cast<int64_t>(sizeof(float)) * (1 + static_cast<int64_t>(slots_.size()));
  if (rows >= 0) return rows * row_elements_ * per;
  return value_.NumElements() * per;
}

int64_t Variable::rows() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(ids_.size());
}

VariableState Variable::CopyState(BufferPool* pool) const {
  absl::ReaderMutexLock lock(&mu_);
  return CopyStateLocked(pool, def_);
}

VariableState Variable::CopyForSnapshot(BufferPool* pool, bool delta) {
  absl::MutexLock lock(&mu_);
  if (def_.kind() == VariableDef::DENSE) return CopyStateLocked(pool, snapshot_def_);
  VariableState s;
  if (!delta) {
    s = CopyStateLocked(pool, snapshot_def_);
  } else {
    // Sorted: the rows are gathered front to back.
    std::sort(touched_rows_.begin(), touched_rows_.end());
    const int64_t k = static_cast<int64_t>(touched_rows_.size());
    const int64_t dim = def_.shape().dim(1);
    auto gather = [&](const Tensor& from) {
      const int64_t bytes = k * dim * static_cast<int64_t>(sizeof(float));
      Tensor t = pool != nullptr ? Tensor(DT_FLOAT, TensorShape({k, dim}), pool->Allocate(bytes))
                                 : Tensor(DT_FLOAT, TensorShape({k, dim}));
      for (int64_t i = 0; i < k; ++i) {
        std::memcpy(t.data<float>() + i * dim, from.data<float>() + touched_rows_[i] * dim, dim * sizeof(float));
      }
      return t;
    };
    s.def = snapshot_def_;
    s.updates = updates_;
    s.delta = true;
    s.value = gather(value_);
    for (const Tensor& t : slots_) s.slots.push_back(gather(t));
    s.ids = Tensor(DT_INT64, TensorShape({k}));
    // A fixed table's ids are its row numbers (row_begin + row).
    const int64_t begin = def_.row_end() > 0 ? def_.row_begin() : 0;
    for (int64_t i = 0; i < k; ++i) {
      s.ids.data<int64_t>()[i] =
          def_.kind() == VariableDef::HASH_TABLE ? ids_[touched_rows_[i]] : begin + touched_rows_[i];
    }
  }
  for (int64_t row : touched_rows_) touched_[row] = 0;
  touched_rows_.clear();
  return s;
}

VariableState Variable::CopyStateLocked(BufferPool* pool, const VariableDef& def) const {
  VariableState s;
  s.def = def;
  s.updates = updates_;
  auto copy = [pool](const Tensor& t) { return pool != nullptr ? pool->Copy(t) : t.Copy(); };
  if (def_.kind() != VariableDef::HASH_TABLE) {
    s.value = copy(value_);
    for (const Tensor& t : slots_) s.slots.push_back(copy(t));
    return s;
  }
  int64_t n = static_cast<int64_t>(ids_.size());
  s.value = copy(value_.Slice(0, n));
  for (const Tensor& t : slots_) s.slots.push_back(copy(t.Slice(0, n)));
  s.ids = Tensor::FromVector<int64_t>(ids_, TensorShape({n}));
  return s;
}

absl::Status Variable::CheckState(const VariableState& state) const {
  VariableDef saved = state.def;
  // A hash table saved before its shard was recorded: the same layout
  // (the chief restores a store's own snapshot only then) is its shard.
  if (saved.kind() == VariableDef::HASH_TABLE && saved.hash_shards() == 0) {
    saved.set_hash_shard(def_.hash_shard());
    saved.set_hash_shards(def_.hash_shards());
  }
  RETURN_IF_ERROR(SameAs(saved));
  const int num_slots = SlotsOf(def_, optimizer_->num_slots());
  if (state.slots.size() != static_cast<size_t>(num_slots)) {
    return Bad(def_,
               absl::StrCat("snapshot has ", state.slots.size(), " optimizer slots, ",
                            def_.has_moving_average() ? "a moving average" : optimizer_->name(), " needs ", num_slots));
  }
  // The value's shape: ours, or [n, dim] for a hash table of n ids.
  TensorShape expected = shape_;
  if (def_.kind() == VariableDef::HASH_TABLE) {
    if (state.ids.dtype() != DT_INT64 || state.ids.shape().rank() != 1) {
      return Bad(def_, "snapshot of a hash table has no int64 [n] ids");
    }
    expected = TensorShape({state.ids.NumElements(), def_.shape().dim(1)});
    const int64_t* ids = state.ids.data<int64_t>();
    for (int64_t i = 0; i < state.ids.NumElements(); ++i) {
      if (HashShardOf(ids[i], def_.hash_shards()) != def_.hash_shard()) {
        return absl::DataLossError(absl::StrCat("variable ", def_.name(), ": snapshot row ", i, " has id ", ids[i],
                                                ", which is not this store's", HashShardText(def_)));
      }
    }
  }
  if (state.value.dtype() != DT_FLOAT || state.value.shape() != expected) {
    return Bad(def_, absl::StrCat("snapshot value is ", DataTypeName(state.value.dtype()),
                                  state.value.shape().ToString(), ", expected float32", expected.ToString()));
  }
  for (const Tensor& t : state.slots) {
    if (t.dtype() != DT_FLOAT || t.shape() != expected) {
      return Bad(def_, absl::StrCat("snapshot slot is ", DataTypeName(t.dtype()), t.shape().ToString(),
                                    ", expected float32", expected.ToString()));
    }
  }
  return absl::OkStatus();
}

absl::Status Variable::LoadState(const VariableState& state) {
  RETURN_IF_ERROR(CheckState(state));
  absl::MutexLock lock(&mu_);
  updates_ = state.updates;
  if (def_.kind() != VariableDef::HASH_TABLE) {
    value_ = state.value.Copy();
    slots_.clear();
    for (const Tensor& t : state.slots) slots_.push_back(t.Copy());
    for (int64_t row : touched_rows_) touched_[row] = 0;  // no snapshot's base
    touched_rows_.clear();
    return absl::OkStatus();
  }
  const int64_t n = state.ids.NumElements();
  ids_.clear();
  value_ = Tensor();
  slots_.clear();
  touched_.clear();  // the restored state is no snapshot's base
  touched_rows_.clear();
  GrowLocked(std::max(kInitialHashRows, 2 * n));
  std::memcpy(value_.raw_data(), state.value.raw_data(), state.value.TotalBytes());
  for (size_t i = 0; i < slots_.size(); ++i) {
    std::memcpy(slots_[i].raw_data(), state.slots[i].raw_data(), state.slots[i].TotalBytes());
  }
  ids_.assign(state.ids.data<int64_t>(), state.ids.data<int64_t>() + n);
  index_.clear();
  for (int64_t i = 0; i < n; ++i) index_.emplace(ids_[i], i);
  return absl::OkStatus();
}

}  // namespace psrt
