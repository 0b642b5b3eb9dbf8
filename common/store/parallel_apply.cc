#include "common/store/parallel_apply.h"

#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace psrt {
namespace {

// Runs apply(i) for each of n updates of `elements` floats in all, on the
// pool's threads when that is worth it; the first error.
absl::Status ApplyAll(WorkPool* pool, const std::vector<Variable*>& vars, int64_t elements,
                      const std::function<absl::Status(size_t)>& apply) {
  const size_t n = vars.size();
  absl::flat_hash_set<const Variable*> distinct(vars.begin(), vars.end());
  if (pool == nullptr || n < 2 || elements < kMinParallelElements || distinct.size() != n) {
    absl::Status first;
    for (size_t i = 0; i < n; ++i) first.Update(apply(i));
    return first;
  }
  absl::Mutex mu;
  absl::Status first;
  pool->ParallelFor(static_cast<int64_t>(n), [&](int64_t i) {
    absl::Status s = apply(static_cast<size_t>(i));
    if (s.ok()) return;
    absl::MutexLock lock(&mu);
    first.Update(s);
  });
  return first;
}

}  // namespace

absl::Status ApplyDenseAll(WorkPool* pool, const std::vector<Variable*>& vars,
                           const std::vector<const Tensor*>& grads) {
  int64_t elements = 0;
  for (const Tensor* g : grads) elements += g->NumElements();
  return ApplyAll(pool, vars, elements, [&](size_t i) { return vars[i]->ApplyDense(*grads[i], pool); });
}

absl::Status ApplyRowsAll(WorkPool* pool, const std::vector<Variable*>& vars,
                          const std::vector<SparseUpdate>& rows) {
  int64_t elements = 0;
  for (const SparseUpdate& u : rows) elements += u.values.NumElements();
  return ApplyAll(pool, vars, elements,
                  [&](size_t i) { return vars[i]->ApplyRows(rows[i].ids, rows[i].values, pool); });
}

}  // namespace psrt
