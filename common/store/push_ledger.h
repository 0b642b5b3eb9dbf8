// PushLedger: the part of a parameter server (server_core.h) that keeps
// what it has taken of workers' pushes.
//
// It owns:
//   - the steps each worker's Push and, apart, its PushRows were applied
//     for (the last kRecentPushes of a worker's incarnation; a new
//     incarnation starts afresh), so that a retried request (RequestId:
//     worker, incarnation, step) is acknowledged and changes nothing;
//   - the parts of bucketed steps taken so far (PushParts);
//   - under SYNC, the step being gathered: which workers pushed it, the sum
//     of their dense gradients and their rows, applied as the mean once all
//     are in (ApplyMean).
// The core decides what a push is (a duplicate, a part, a whole step) and
// when a SYNC step is complete; the ledger records it and sums.
//
// Thread-compatible: the core calls it holding StepGate::mu(), so that a
// push's check, record and count are one with the step counters. It takes
// no lock of its own; ApplyMean applies to variables, each under its own
// lock, with the caller holding the variable map (shared) as well.
//
//   if (ledger.PushSeen(id)) return duplicate;
//   ASSIGN_OR_RETURN(bool whole, ledger.TakePart(id));
//   if (whole) ledger.RecordPush(id);
#ifndef PSRT_COMMON_STORE_PUSH_LEDGER_H_
#define PSRT_COMMON_STORE_PUSH_LEDGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store/push_parts.h"
#include "common/store/variable.h"
#include "common/transport/ps_types.h"
#include "common/work_pool.h"
#include "proto/ps_service.pb.h"

namespace psrt {

class PushLedger {
 public:
  // Steps remembered per worker and request kind.
  static constexpr size_t kRecentPushes = 512;

  // Whether Push applied `id` already: its whole step, or this part of it.
  bool PushSeen(const RequestId& id) const { return Seen(pushes_, id) || parts_.Seen(id); }
  // Whether this part of a bucketed step was taken (false for bucket 0).
  bool PartSeen(const RequestId& id) const { return parts_.Seen(id); }
  // Push applied `id`'s whole step.
  void RecordPush(const RequestId& id) { Record(&pushes_, id); }
  // PushRows' own record: the same step also sends a Push.
  bool RowsSeen(const RequestId& id) const { return Seen(rows_, id); }
  void RecordRows(const RequestId& id) { Record(&rows_, id); }
  // A part of a step taken; whether the step is whole (PushParts::Take,
  // whose contract and errors it has).
  absl::StatusOr<bool> TakePart(const RequestId& id, NamedTensors* hold = nullptr) { return parts_.Take(id, hold); }

  // SYNC: whether `worker` pushed the step being gathered, and how many
  // workers have.
  bool Gathered(int worker) const { return sync_pushed_.count(worker) > 0; }
  int gathered_workers() const { return static_cast<int>(sync_pushed_.size()); }
  // `worker`'s whole step of dense gradients (float32, checked by the
  // caller), added to the sums; the first of a variable is copied, into the
  // last step's sum buffer when there is one of its shape.
  void GatherDense(int worker, const NamedTensors& grads);
  // Rows of the step, kept until ApplyMean (the tensors shared, not copied).
  void GatherRows(const std::vector<SparseUpdate>& rows);
  // Applies the step gathered as the mean over `num_workers`: each dense
  // sum scaled in place and applied together, then each table's rows
  // joined, scaled and applied; `find` names the variables (the caller's
  // lock held). Then the step is emptied (the sums' buffers kept for the
  // next step, where nothing else holds them). On error it returns at
  // once, the step left as it is.
  absl::Status ApplyMean(int num_workers, const std::function<absl::StatusOr<Variable*>(const std::string&)>& find,
                         WorkPool* pool);

  // Forgets everything: the record, the parts, the step gathered (a restore
  // or a new generation: the same steps will be pushed again).
  void Clear();

 private:
  struct WorkerPushes {
    uint64_t incarnation = 0;
    std::set<int64_t> steps;  // recent applied steps
  };
  static bool Seen(const std::map<int, WorkerPushes>& seen, const RequestId& id);
  static void Record(std::map<int, WorkerPushes>* seen, const RequestId& id);

  std::map<int, WorkerPushes> pushes_;
  std::map<int, WorkerPushes> rows_;
  PushParts parts_;  // bucketed pushes' parts
  std::set<int> sync_pushed_;
  std::map<std::string, Tensor> sync_dense_;
  // The last step's sums, filled again by the next: a fresh buffer of a
  // large model's size costs the PS a page fault per 4 KiB every step
  // (measured: issue #26, scale_bench --netns). Their memory is held
  // between steps, as it is during each; Clear frees it.
  std::map<std::string, Tensor> spare_dense_;
  std::map<std::string, std::vector<std::pair<Tensor, Tensor>>> sync_rows_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_PUSH_LEDGER_H_
