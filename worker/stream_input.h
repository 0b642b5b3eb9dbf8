// StreamInput: the batches a worker reads, step by step: its assignment's
// data streams in turn (elastic jobs, common/input/streams.h), or its one
// shard (batch b at step b) when the assignment names no stream.
//
// Seek(step) puts it where the batch of `step` comes next, rebuilding its
// datasets there; a caller that dropped a batch it read (a step dropped by
// a pause) seeks back, so no batch is skipped.
//
//   ASSIGN_OR_RETURN(auto in, StreamInput::Create(assignment, make_dataset));
//   if (in->next_step() != step) RETURN_IF_ERROR(in->Seek(step));
//   ASSIGN_OR_RETURN(bool more, in->Next(&batch));
//
// One thread at a time.
#ifndef PSRT_WORKER_STREAM_INPUT_H_
#define PSRT_WORKER_STREAM_INPUT_H_

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/input/dataset.h"
#include "common/input/streams.h"
#include "proto/worker_service.pb.h"

namespace psrt {

using MakeDataset = std::function<absl::StatusOr<std::unique_ptr<Dataset>>(const WorkerAssignment&)>;

// The default MakeDataset: the assignment's train split, shard shard_index
// of num_shards, from batch start_step on.
absl::StatusOr<std::unique_ptr<Dataset>> ShardDataset(const WorkerAssignment& a);

// The stream and batch the assignment reads at `step`.
StreamPos BatchOf(const WorkerAssignment& a, int64_t step);

class StreamInput {
 public:
  // Positioned at the assignment's start step; the streams `previous` does
  // not hold are built on other threads, the first read of each waiting
  // for it (an assignment of no step, a warm-up, waits for them all). `make` builds one shard's
  // dataset from an assignment (shard_index, num_shards, start_step = the
  // first batch), as the worker's deps do. `previous` (may be null; left
  // empty) gives its datasets of the same streams: a stream it holds at or
  // before the batch needed is moved over and read forward, not rebuilt, so
  // a worker keeping its streams through a membership change starts again
  // in no time.
  static absl::StatusOr<std::unique_ptr<StreamInput>> Create(const WorkerAssignment& a, MakeDataset make,
                                                             StreamInput* previous = nullptr);

  // Puts each stream where `step` reads it: the last batches read are kept
  // (a step a pause dropped is read again from them), a stream behind is
  // read forward, one ahead rebuilt.
  absl::Status Seek(int64_t step);
  // The batch of next_step(); false when the input ran out.
  absl::StatusOr<bool> Next(Batch* batch);
  int64_t next_step() const { return step_; }
  // While *cancel is true, a Next waiting for a stream to decode returns
  // CANCELLED, leaving the decode under way (not owned; may be null).
  void set_cancel(const std::atomic<bool>* cancel) { cancel_ = cancel; }

 private:
  // One stream: its dataset yields batch `next` next; `recent` keeps the
  // last batches read, by index; `want` is the batch to hand out next.
  struct Stream {
    int index = 0;
    int64_t want = 0;
    int64_t next = 0;
    std::unique_ptr<Dataset> data;
    std::map<int64_t, Batch> recent;
    // A dataset being built at batch `next` on another thread (a stream
    // new to this worker): the streams it keeps go on meanwhile.
    std::future<absl::StatusOr<std::unique_ptr<Dataset>>> pending;
  };
  StreamInput(WorkerAssignment shard, std::vector<StreamPos> streams, int64_t base, MakeDataset make)
      : shard_(std::move(shard)), starts_(std::move(streams)), base_(base), make_(std::move(make)) {}
  // Drops s's dataset, its pending build and its kept batches, giving the
  // memory back to the system.
  void Drop(Stream* s);
  // Builds s's dataset at s.want (in the background: Start).
  absl::Status Build(Stream* s);
  void StartBuild(Stream* s);
  absl::StatusOr<bool> NextOf(Stream* s, Batch* batch);

  const WorkerAssignment shard_;  // input, seed, num_shards: what a dataset needs
  const std::vector<StreamPos> starts_;  // at base_; one {shard_index, 0} when none
  const int64_t base_;
  const MakeDataset make_;
  std::vector<Stream> streams_;  // as starts_
  const std::atomic<bool>* cancel_ = nullptr;
  int64_t step_ = 0;
};

}  // namespace psrt

#endif  // PSRT_WORKER_STREAM_INPUT_H_
