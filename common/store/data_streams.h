// DataStreams: what a parameter server applied of each data stream
// (RequestId.data_*, set by workers outside SYNC) since its last restore or
// fresh start, so that each batch's gradient is applied here once, whoever
// pushes it and however the push is cut into parts.
//
// Per stream it keeps `next`: every batch below it was applied here whole
// (PsStatusResponse.stream_next_batch); a push of one is a duplicate. And for
// a batch at or past `next` that is in progress (its step came in parts, or
// its rows before its dense gradients, and a worker died between them), the
// variables applied of it: dense gradients and tables' rows, by variable
// name. A push of such a batch, from any worker or incarnation, applies only
// the variables of it not applied yet. Variables are recorded, not bucket
// numbers: a new incarnation may cut its step into other buckets (they fill
// in the order its backward pass produces gradients) and still applies
// exactly the rest. The batch is whole (`next` moves past it) when one
// worker's step of it is complete (PushParts), which applies every variable
// once.
//
//   if (streams.Done(s, b)) return duplicate;
//   std::set<std::string> fresh = streams.Take(s, b, names);  // apply only these
//   if (whole) streams.Complete(s, b);
//
// Bounded: the caller names at most kMaxStreams streams; per stream at most
// kOpenBatches batches are in progress (an older one is forgotten: the chief
// restarts a stream at its first batch not applied everywhere, so a batch
// left in progress is the next one pushed, never one behind others).
//
// Thread-compatible: the PS calls it under its consistency lock.
#ifndef PSRT_COMMON_STORE_DATA_STREAMS_H_
#define PSRT_COMMON_STORE_DATA_STREAMS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace psrt {

class DataStreams {
 public:
  static constexpr int32_t kMaxStreams = 1 << 16;  // streams a push may name: [0, this)
  static constexpr size_t kOpenBatches = 8;

  // Whether `batch` of `stream` was applied here whole.
  bool Done(int32_t stream, int64_t batch) const {
    auto it = next_.find(stream);
    return it != next_.end() && batch < it->second;
  }

  // Whether a push of `batch` applied part of it here and none completed it.
  bool InProgress(int32_t stream, int64_t batch) const {
    auto it = open_.find(stream);
    return it != open_.end() && it->second.count(batch) > 0;
  }

  // Of `names` (the variables a push of the batch carries; a name may
  // repeat), those not applied yet for it, now recorded as applied.
  // REQUIRES: !Done(stream, batch).
  std::set<std::string> Take(int32_t stream, int64_t batch, const std::vector<std::string>& names) {
    if (names.empty()) return {};
    std::map<int64_t, std::set<std::string>>& open = open_[stream];
    std::set<std::string>& applied = open[batch];
    std::set<std::string> fresh;
    for (const std::string& name : names) {
      if (!applied.count(name)) fresh.insert(name);
    }
    applied.insert(fresh.begin(), fresh.end());
    while (open.size() > kOpenBatches) open.erase(open.begin());
    return fresh;
  }

  // `batch` applied whole: it and every batch below it are duplicates here.
  void Complete(int32_t stream, int64_t batch) {
    int64_t& next = next_[stream];
    next = std::max(next, batch + 1);
    auto it = open_.find(stream);
    if (it == open_.end()) return;
    it->second.erase(it->second.begin(), it->second.lower_bound(next));
    if (it->second.empty()) open_.erase(it);
  }

  // Per stream with a batch applied whole, the next batch
  // (PsStatusResponse.stream_next_batch).
  const std::map<int32_t, int64_t>& next() const { return next_; }
  // Per stream with a batch in progress, the lowest such batch
  // (PsStatusResponse.stream_part_batch).
  std::map<int32_t, int64_t> InProgress() const {
    std::map<int32_t, int64_t> out;
    for (const auto& [stream, open] : open_) {
      if (!open.empty()) out[stream] = open.begin()->first;
    }
    return out;
  }

  // Every batch of each stream below `next` applied whole, nothing in
  // progress (a rebuilt copy's record, RestoreRequest.stream_next_batch).
  // REQUIRES: each stream in [0, kMaxStreams), each batch >= 0.
  template <typename Map>
  void Reset(const Map& next) {
    Clear();
    for (const auto& [stream, batch] : next) next_[stream] = batch;
  }

  // Forgets everything (a restore or a fresh start: the batches since will
  // be pushed again).
  void Clear() {
    next_.clear();
    open_.clear();
  }

 private:
  std::map<int32_t, int64_t> next_;
  std::map<int32_t, std::map<int64_t, std::set<std::string>>> open_;  // batches >= next_ in progress
};

}  // namespace psrt

#endif  // PSRT_COMMON_STORE_DATA_STREAMS_H_
