// Data streams: how an elastic job deals its data to a changing set of
// workers without skipping or repeating an example within an epoch.
//
// The training split is cut into `num_streams` streams (example i goes to
// stream i mod num_streams; each is a Dataset shard, shuffled per epoch
// with the job's seed, so batch b of a stream is the same wherever it is
// read). A stream is read in order, one batch at a time, by exactly one
// worker at a time. A worker given streams s_0..s_{m-1} from step `base`
// reads, at step base + j, batch start_batch + j / m of stream s_{j mod m}.
// When the membership changes, every worker stops at a step boundary, the
// chief computes where each stream stands (PositionsAt) and deals the
// streams again (Deal): a leaver's streams go on from where it stopped, a
// joiner takes streams from the workers holding the most. So within an
// epoch of a stream each example is read exactly once, whoever reads it.
//
// Pure functions; no locking.
#ifndef PSRT_COMMON_INPUT_STREAMS_H_
#define PSRT_COMMON_INPUT_STREAMS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"

namespace psrt {

struct StreamPos {
  int index = 0;        // which stream
  int64_t batch = 0;    // the next batch of it to read
  bool operator==(const StreamPos& o) const { return index == o.index && batch == o.batch; }
};

// The stream and batch a worker holding `streams` since step `base` reads
// at `step`; before `base` (a restore rewinds a worker) it counts back,
// never below batch 0. REQUIRES: streams not empty.
StreamPos StreamAt(const std::vector<StreamPos>& streams, int64_t base, int64_t step);

// Where each of `streams` (held since `base`) stands once the steps before
// `step` are done: its next batch (counted back before `base`, never
// below 0).
std::vector<StreamPos> PositionsAt(const std::vector<StreamPos>& streams, int64_t base, int64_t step);

// Deals `num_streams` streams to `members` (worker indices). `held`: what
// each worker holds now, at its current position (a worker not in
// `members` is leaving: its streams go to the others). A member keeps what
// it holds where it can; streams nobody holds (the start of the job) begin at
// batch 0, dealt in index order; then streams move from the
// members holding most to those holding fewest until they differ by at
// most one. INVALID_ARGUMENT when members is empty or larger than
// num_streams, or a stream is held twice.
absl::Status Deal(int num_streams, const std::vector<int>& members,
                  const std::map<int, std::vector<StreamPos>>& held,
                  std::map<int, std::vector<StreamPos>>* dealt);

}  // namespace psrt

#endif  // PSRT_COMMON_INPUT_STREAMS_H_
