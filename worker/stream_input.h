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

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/input/dataset.h"
#include "common/input/streams.h"
#include "proto/worker_service.pb.h"

namespace psrt {

using MakeDataset = std::function<absl::StatusOr<std::unique_ptr<Dataset>>(const WorkerAssignment&)>;

// The stream and batch the assignment reads at `step`.
StreamPos BatchOf(const WorkerAssignment& a, int64_t step);

class StreamInput {
 public:
  // Positioned at the assignment's start step. `make` builds one shard's
  // dataset from an assignment (shard_index, num_shards, start_step = the
  // first batch), as the worker's deps do.
  static absl::StatusOr<std::unique_ptr<StreamInput>> Create(const WorkerAssignment& a, MakeDataset make);

  absl::Status Seek(int64_t step);
  // The batch of next_step(); false when the input ran out.
  absl::StatusOr<bool> Next(Batch* batch);
  int64_t next_step() const { return step_; }

 private:
  StreamInput(WorkerAssignment shard, std::vector<StreamPos> streams, int64_t base, MakeDataset make)
      : shard_(std::move(shard)), streams_(std::move(streams)), base_(base), make_(std::move(make)) {}

  const WorkerAssignment shard_;  // input, seed, num_shards: what a dataset needs
  const std::vector<StreamPos> streams_;  // at base_; one {shard_index, 0} when none
  const int64_t base_;
  const MakeDataset make_;
  std::vector<std::unique_ptr<Dataset>> datasets_;  // one per stream
  int64_t step_ = 0;
};

}  // namespace psrt

#endif  // PSRT_WORKER_STREAM_INPUT_H_
