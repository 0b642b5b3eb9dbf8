#include "worker/stream_input.h"

#include <malloc.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

// The streams of `a` at its start step: its own shard (batch = step) when
// it names none.
std::vector<StreamPos> StreamsOf(const WorkerAssignment& a) {
  if (a.stream_size() == 0) return {StreamPos{a.shard_index(), 0}};
  std::vector<StreamPos> out;
  for (const DataStream& s : a.stream()) out.push_back(StreamPos{s.index(), s.start_batch()});
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> ShardDataset(const WorkerAssignment& a) {
  DatasetOptions o;
  o.input = a.input();
  o.split = a.input().train();
  o.shard_index = a.shard_index();
  o.num_shards = std::max(1, a.num_shards());
  o.seed = a.seed();
  o.skip_batches = a.start_step();  // the batches of the steps before it
  return Dataset::Create(o);
}

StreamPos BatchOf(const WorkerAssignment& a, int64_t step) {
  if (a.stream_size() == 0) return StreamPos{a.shard_index(), step};
  return StreamAt(StreamsOf(a), a.start_step(), step);
}

absl::StatusOr<std::unique_ptr<StreamInput>> StreamInput::Create(const WorkerAssignment& a, MakeDataset make,
                                                                 StreamInput* previous) {
  // Only what a dataset reads: not the graph (the largest part).
  WorkerAssignment shard;
  *shard.mutable_input() = a.input();
  shard.set_seed(a.seed());
  shard.set_num_shards(a.num_shards());
  // Without streams, batch b of the shard is read at step b: base 0.
  const int64_t base = a.stream_size() == 0 ? 0 : a.start_step();
  std::unique_ptr<StreamInput> in(new StreamInput(std::move(shard), StreamsOf(a), base, std::move(make)));
  // The same data (input, seed, number of streams) or none of it is reused.
  const bool same = previous != nullptr && previous->shard_.SerializeAsString() == in->shard_.SerializeAsString();
  if (previous != nullptr) {
    // Streams not kept go first: one decoded copy of the data at a time.
    std::vector<Stream>& old = previous->streams_;
    old.erase(std::remove_if(old.begin(), old.end(),
                             [&](const Stream& s) {
                               return !same || std::none_of(in->starts_.begin(), in->starts_.end(),
                                                            [&](const StreamPos& p) { return p.index == s.index; });
                             }),
              old.end());
  }
  const bool running = previous != nullptr && !previous->streams_.empty();  // kept some
  for (const StreamPos& p : PositionsAt(in->starts_, in->base_, a.start_step())) {
    Stream s;
    s.index = p.index;
    s.want = p.batch;
    for (Stream& old : same ? previous->streams_ : in->streams_) {
      if (old.index != p.index || (old.data == nullptr && !old.pending.valid())) continue;
      s.data = std::move(old.data);
      s.pending = std::move(old.pending);  // still being built: it goes on
      s.next = old.next;
      s.recent = std::move(old.recent);
    }
    // Built now on a first start (a bad input fails the Start), from now
    // on another thread for a stream new to a running worker, and not at
    // all if what was moved over serves it.
    if ((s.data == nullptr && !s.pending.valid()) || (s.next > s.want && s.recent.count(s.want) == 0)) {
      if (running) {
        in->StartBuild(&s);
      } else {
        RETURN_IF_ERROR(in->Build(&s));
      }
    }
    in->streams_.push_back(std::move(s));
  }
  if (previous != nullptr) previous->streams_.clear();
  in->step_ = a.start_step();
  // A run of no step is a warm-up (a joiner before the others pause): it
  // returns once every stream is decoded.
  if (a.end_step() == a.start_step()) {
    for (Stream& s : in->streams_) {
      if (!s.pending.valid()) continue;
      ASSIGN_OR_RETURN(s.data, s.pending.get());
    }
  }
  return in;
}

void StreamInput::Drop(Stream* s) {
  s->pending = {};  // a build at another batch: waited for, and dropped
  s->recent.clear();
  if (s->data == nullptr) return;
  s->data.reset();
  // A decoded stream is many small allocations (Fashion-MNIST's: 188 MB in
  // 60,000 examples) made on whichever thread built it; freed here they
  // stay in that thread's malloc arena, and the next copy is decoded into
  // another. A worker seeking back and forth (pauses, resumes at other
  // steps) grew by one stream copy per arena, 265 -> 1617 MB in
  // control_soak_test's seek case. Give the freed pages back now.
  ::malloc_trim(0);
}

void StreamInput::StartBuild(Stream* s) {
  Drop(s);  // one decoded copy of each stream at a time
  WorkerAssignment a = shard_;
  a.set_shard_index(s->index);
  a.set_start_step(s->want);
  s->next = s->want;
  s->pending = std::async(std::launch::async, [make = make_, a]() { return make(a); });
}

absl::Status StreamInput::Build(Stream* s) {
  Drop(s);  // one decoded copy of each stream at a time
  WorkerAssignment a = shard_;
  a.set_shard_index(s->index);
  a.set_start_step(s->want);
  ASSIGN_OR_RETURN(s->data, make_(a));
  s->next = s->want;
  return absl::OkStatus();
}

absl::Status StreamInput::Seek(int64_t step) {
  const std::vector<StreamPos> at = PositionsAt(starts_, base_, step);
  for (size_t r = 0; r < streams_.size(); ++r) streams_[r].want = at[r].batch;
  step_ = step;
  return absl::OkStatus();
}

absl::StatusOr<bool> StreamInput::NextOf(Stream* s, Batch* batch) {
  constexpr size_t kKeep = 4;  // a dropped step, and a prefetched one
  if (s->pending.valid()) {
    while (s->pending.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
      if (cancel_ != nullptr && cancel_->load()) {
        return absl::CancelledError(absl::StrCat("data stream ", s->index, " still decoding"));
      }
    }
    absl::StatusOr<std::unique_ptr<Dataset>> built = s->pending.get();
    if (!built.ok()) {
      // The data, not a PS: the worker fails rather than waits.
      s->data.reset();
      return absl::InvalidArgumentError(absl::StrCat("data stream ", s->index, ": ", built.status().message()));
    }
    s->data = *std::move(built);
  }
  auto kept = s->recent.find(s->want);
  if (kept != s->recent.end()) {
    *batch = kept->second;  // tensors share their buffers
    ++s->want;
    return true;
  }
  // Behind: read forward to it, unless that is far (a resume far ahead):
  // a new dataset skips to a batch without making the batches between.
  constexpr int64_t kReadForwardAtMost = 256;
  if (s->data == nullptr || s->next > s->want || s->want - s->next > kReadForwardAtMost) RETURN_IF_ERROR(Build(s));
  while (true) {
    ASSIGN_OR_RETURN(bool more, s->data->Next(batch));
    if (!more) return false;
    ++s->next;
    if (s->next - 1 == s->want) break;  // else read forward to it
  }
  s->recent[s->want] = *batch;
  while (s->recent.size() > kKeep) s->recent.erase(s->recent.begin());
  ++s->want;
  return true;
}

absl::StatusOr<bool> StreamInput::Next(Batch* batch) {
  const int64_t m = static_cast<int64_t>(streams_.size());
  if (m == 0) return absl::FailedPreconditionError("the input has no stream");
  const int64_t j = step_ - base_;
  ASSIGN_OR_RETURN(bool more, NextOf(&streams_[((j % m) + m) % m], batch));
  if (more) ++step_;
  return more;
}

}  // namespace psrt
