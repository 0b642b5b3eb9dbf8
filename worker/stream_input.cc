#include "worker/stream_input.h"

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

StreamPos BatchOf(const WorkerAssignment& a, int64_t step) {
  if (a.stream_size() == 0) return StreamPos{a.shard_index(), step};
  return StreamAt(StreamsOf(a), a.start_step(), step);
}

absl::StatusOr<std::unique_ptr<StreamInput>> StreamInput::Create(const WorkerAssignment& a, MakeDataset make) {
  // Only what a dataset reads: not the graph (the largest part).
  WorkerAssignment shard;
  *shard.mutable_input() = a.input();
  shard.set_seed(a.seed());
  shard.set_num_shards(a.num_shards());
  // Without streams, batch b of the shard is read at step b: base 0.
  const int64_t base = a.stream_size() == 0 ? 0 : a.start_step();
  std::unique_ptr<StreamInput> in(new StreamInput(std::move(shard), StreamsOf(a), base, std::move(make)));
  RETURN_IF_ERROR(in->Seek(a.start_step()));
  return in;
}

absl::Status StreamInput::Seek(int64_t step) {
  datasets_.clear();  // one decoded copy of each stream at a time
  step_ = -1;         // until every stream is in place
  for (const StreamPos& p : PositionsAt(streams_, base_, step)) {
    WorkerAssignment a = shard_;
    a.set_shard_index(p.index);
    a.set_start_step(p.batch);
    ASSIGN_OR_RETURN(std::unique_ptr<Dataset> d, make_(a));
    datasets_.push_back(std::move(d));
  }
  step_ = step;
  return absl::OkStatus();
}

absl::StatusOr<bool> StreamInput::Next(Batch* batch) {
  const int64_t m = static_cast<int64_t>(datasets_.size());
  if (m == 0 || step_ < 0) return absl::FailedPreconditionError("the input is not positioned (a Seek failed)");
  const int64_t j = std::max<int64_t>(0, step_ - base_);
  ASSIGN_OR_RETURN(bool more, datasets_[j % m]->Next(batch));
  if (more) ++step_;
  return more;
}

}  // namespace psrt
