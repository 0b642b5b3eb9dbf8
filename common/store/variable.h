// Variable: one variable (or row slice of one) held by a parameter server,
// with its optimizer slots.
//
// Three kinds (VariableDef.kind): DENSE, a tensor (rows [row_begin,
// row_end) of a partitioned one); FIXED_TABLE, an embedding table with ids
// in [row_begin, row_end); HASH_TABLE, an embedding table over any int64
// id whose rows are made on first touch with the variable's initializer.
//
// Readers never see a half-applied update: reads copy under a reader lock,
// updates run under the writer lock. Bad input (wrong shape or dtype, an id
// out of range) is refused before anything changes. Thread-safe.
#ifndef PSRT_COMMON_STORE_VARIABLE_H_
#define PSRT_COMMON_STORE_VARIABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/buffer_pool.h"
#include "common/optimizer.h"
#include "common/snapshot/variable_state.h"
#include "common/tensor.h"
#include "common/transport/ps_types.h"
#include "common/work_pool.h"
#include "proto/ps_service.pb.h"

namespace psrt {

// What one variable may take: bytes of value plus optimizer slots, and for
// hash tables the rows that first touches may make (a flood of new ids is
// refused with RESOURCE_EXHAUSTED instead of growing without bound).
struct VariableLimits {
  int64_t max_bytes = INT64_MAX;
  int64_t max_hash_rows = INT64_MAX;
};

class Variable {
 public:
  // `optimizer` is not owned and outlives the variable; `seed` seeds the
  // initializer. Refuses bad definitions, naming the variable.
  // A variable larger than limits.max_bytes is refused with
  // RESOURCE_EXHAUSTED before anything is allocated.
  static absl::StatusOr<std::unique_ptr<Variable>> Create(const VariableDef& def, const Optimizer* optimizer,
                                                          const struct VariableLimits& limits);
  static absl::StatusOr<std::unique_ptr<Variable>> Create(const VariableDef& def, const Optimizer* optimizer);

  const VariableDef& def() const { return def_; }
  const TensorShape& shape() const { return shape_; }  // of what this PS holds
  // Checks that `other` describes the same variable (for idempotent creates).
  absl::Status SameAs(const VariableDef& other) const;

  // The value (dense and fixed tables), as of the last whole update. No
  // bytes are copied: the result shares storage with the variable, and the
  // next update copies the storage first if a reader still holds it
  // (copy-on-write), so the result never changes. Callers must not write
  // to it.
  absl::StatusOr<Tensor> Read() const;
  // Applies a gradient of exactly shape(); refuses others. With a pool, a
  // large variable is updated in row ranges on its threads (each element
  // gets the same arithmetic as in one pass: the result is identical);
  // below kMinPartElements per part it stays on the calling thread.
  absl::Status ApplyDense(const Tensor& grad, WorkPool* pool = nullptr);
  // Fewest elements one thread of a pool is given to update.
  static constexpr int64_t kMinPartElements = int64_t{1} << 16;

  // Rows of the ids, [n, dim] in their order. Fixed tables refuse ids out of
  // range; hash tables make missing rows, or with !make_rows answer them
  // with the initial values a new row would get, changing nothing.
  absl::StatusOr<Tensor> ReadRows(const Tensor& ids, BufferPool* pool = nullptr, bool make_rows = true);
  // Row-wise lazy update; `ids` may repeat (their gradients are summed).
  // With a pool, many rows are updated in ranges on its threads, as
  // ApplyDense.
  absl::Status ApplyRows(const Tensor& ids, const Tensor& grads, WorkPool* pool = nullptr);

  // Hash tables: whether `ids` fit under the row limit (changes nothing).
  absl::Status CheckRoom(const Tensor& ids) const;

  int64_t bytes() const;  // value and slots
  int64_t rows() const;   // hash tables: rows made so far

  // With a pool, the copy's storage comes from it (storage a previous
  // snapshot released is already paged in: the copy runs at memcpy speed).
  VariableState CopyState(BufferPool* pool = nullptr) const;
  // A checkpoint's copy: as CopyState, or with `delta`, of a table only
  // the rows touched (updated, or for a hash table made) since the previous
  // CopyForSnapshot or LoadState, sorted by row, with their ids (a fixed
  // table's: row numbers) (VariableState.delta). Either way the touched
  // rows start anew: this copy is the base of the next delta. Dense
  // variables are always copied whole.
  VariableState CopyForSnapshot(BufferPool* pool, bool delta);
  // Whether LoadState(state) would succeed; changes nothing. Lets a restore
  // of many variables check them all before it replaces any.
  absl::Status CheckState(const VariableState& state) const;
  // Replaces the state (a restore); `state` must be of this variable.
  absl::Status LoadState(const VariableState& state);

 private:
  Variable(const VariableDef& def, TensorShape shape, const Optimizer* optimizer);
  absl::Status CheckIds(const Tensor& ids) const;
  // Hash tables: refuses ids that would make more rows than the limit.
  absl::Status CheckRoomLocked(const int64_t* ids, int64_t n) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Row index of `id`, making the row if it is new (hash tables).
  int64_t RowOfLocked(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GrowLocked(int64_t rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tables: records that `row` changed (for the next delta).
  void TouchLocked(int64_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (touched_[row]) return;
    touched_[row] = 1;
    touched_rows_.push_back(row);
  }
  // The state with `def` as its definition (def_, or snapshot_def_).
  VariableState CopyStateLocked(BufferPool* pool, const VariableDef& def) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Before an in-place update: gives value_ storage of its own if a Read()
  // result still shares it.
  void UnshareLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const VariableDef def_;
  // What a snapshot records: def_ without the values of a TENSOR initializer
  // (an imported model's or a warm start's), which the snapshot's own value
  // supersedes; copied in the snapshot's pause and written to every index
  // otherwise. Nothing reads a snapshot's initializer.
  const VariableDef snapshot_def_;
  const TensorShape shape_;
  const int64_t row_elements_;
  const Optimizer* const optimizer_;
  int64_t max_hash_rows_ = INT64_MAX;

  mutable absl::Mutex mu_;
  Tensor value_ ABSL_GUARDED_BY(mu_);
  std::vector<Tensor> slots_ ABSL_GUARDED_BY(mu_);
  int64_t updates_ ABSL_GUARDED_BY(mu_) = 0;
  // Hash tables: id -> row of value_; value_ has capacity rows, size used.
  absl::flat_hash_map<int64_t, int64_t> index_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> ids_ ABSL_GUARDED_BY(mu_);
  // Tables: rows touched since the last snapshot copy, as a byte per row
  // (a hash table's capacity) and a list, so a push marks a row in O(1)
  // and a delta copies and clears in O(touched).
  std::vector<uint8_t> touched_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> touched_rows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_VARIABLE_H_
