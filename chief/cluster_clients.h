// The chief's handles on the other tasks: control-plane calls to each PS
// (create, snapshot, restore, status, and whole-variable pulls for
// evaluation) and to each worker (start, pause, resume, status, shutdown).
// Each call has a deadline and an error that names the task and method.
//
// Thread-compatible; the coordinator's thread uses them.
#ifndef PSRT_CHIEF_CLUSTER_CLIENTS_H_
#define PSRT_CHIEF_CLUSTER_CLIENTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/rpc/channel_cache.h"
#include "common/tensor.h"
#include "proto/ps_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"

namespace psrt {

// The checkpoint a PS request names for the chief's `checkpoint_dir`: its
// last component ("/ckpt/job1/" -> "job1"). The PS keeps its shard in
// <its --snapshot_dir>/NAME/ps-N, the same directory as the chief's when its
// --snapshot_dir is the one above (manifests name shards relative to it).
std::string CheckpointName(absl::string_view checkpoint_dir);

// How long a PS may take to make and initialise what `req` creates before
// it answers: 30 s, plus a second for each 10 MB of values and optimizer
// slots (RMSprop has up to three) its dense variables and fixed tables hold (hash tables
// make rows on first touch). A 10^7 x 16 Adam table is 1.9 GB to write,
// which a busy PS did not finish in 30 s (tests/bench/scale_bench at load
// 30: the job could not start). At most an hour.
absl::Duration CreateVariablesTimeout(const CreateVariablesRequest& req);

class PsAdmin {
 public:
  PsAdmin(std::shared_ptr<grpc::Channel> channel, std::string name);

  // Replicated shards: every call from now on names store `store` at
  // placement `epoch` (replica_header.h), so that it reaches that store's
  // core on this PS (its own, or one it took over). epoch 0: the PS's own.
  void SetReplica(int store, int64_t epoch) {
    store_ = store;
    epoch_ = epoch;
  }

  // `reconfigure`: this PS incarnation already holds the variables, and
  // only the group, generation or role changes (a few lookups), so a PS
  // that does not answer within seconds is hung (stopped, cut off) and the
  // caller goes on instead of waiting what a first creation may take
  // (CreateVariablesTimeout).
  absl::StatusOr<CreateVariablesResponse> CreateVariables(const CreateVariablesRequest& req,
                                                          bool reconfigure = false);
  // `dir` is the chief's checkpoint directory; the PS is sent only its name
  // (CheckpointName), never the path.
  // `variables`: only these (a mirrored replica's share); empty = all.
  // `full_every` > 0: the PS may write a delta (SnapshotRequest.full_every).
  // `req` says the rest (step, wait_durable, keep or retain, variables,
  // full_every); its checkpoint is set here.
  absl::StatusOr<SnapshotResponse> Snapshot(SnapshotRequest req, const std::string& dir);
  // The common case of the above.
  absl::StatusOr<SnapshotResponse> Snapshot(int64_t step, const std::string& dir, bool wait_durable, int keep,
                                            const std::vector<std::string>& variables = {}, int full_every = 0);
  // Restores step and moves the PS to `generation` with it; `dir` as above.
  // `sources`: the checkpoint's stores to assemble from when it was taken
  // with another layout (RestoreRequest.source); empty = the PS's own.
  // `stream_next`: a rebuilt copy's record (RestoreRequest.stream_next_batch).
  absl::StatusOr<RestoreResponse> Restore(int64_t step, const std::string& dir, int64_t generation = 0,
                                          const std::vector<std::string>& sources = {},
                                          const google::protobuf::Map<int32_t, int64_t>* stream_next = nullptr);
  absl::StatusOr<PsStatusResponse> Status(absl::Duration timeout = absl::Seconds(5));
  // Copies variables' state out, loads it in, forgets variables
  // (MoveVariablesRequest): a PS joining or leaving a running job.
  absl::StatusOr<MoveVariablesResponse> MoveVariables(const MoveVariablesRequest& req);
  // Whole tensors (or slices this PS holds) by name, over the protobuf path.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> Pull(
      const std::vector<std::string>& names, int64_t generation = 0);
  const std::string& name() const { return name_; }

 private:
  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (ParameterServer::Stub::*method)(grpc::ClientContext*, const Request&,
                                                                             Response*),
                                const Request& req, absl::Duration timeout, absl::string_view what);
  const std::string name_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  int store_ = 0;
  int64_t epoch_ = 0;
};

class WorkerControl {
 public:
  WorkerControl(std::shared_ptr<grpc::Channel> channel, std::string name);

  absl::Status Start(const WorkerAssignment& assignment);
  // `abandon`: PS tasks the worker cancels its calls to first (a failover).
  // `expected_incarnation` (non-zero): the process the caller believes it
  // pauses; ABORTED when another answers (its step is not the old one's).
  absl::StatusOr<int64_t> Pause(int64_t generation, absl::Duration timeout = absl::Seconds(5),
                                const std::vector<int>& abandon = {}, uint64_t expected_incarnation = 0);
  // `route` (epoch > 0): the placement after a failover (replicated shards).
  // `end_step` (> 0): the run's new, earlier end (early stopping).
  absl::Status Resume(int64_t start_step, int64_t generation, const ReplicaRoute& route = ReplicaRoute(),
                      int64_t end_step = 0);
  // Resume with the placement and PS of `a` (a PS joined or left): the
  // worker replaces only its PS client (ResumeRequest.placement).
  absl::Status ResumePlaced(int64_t start_step, int64_t generation, const WorkerAssignment& a, int64_t end_step = 0);
  absl::StatusOr<WorkerStatusResponse> Status(absl::Duration timeout = absl::Seconds(5));
  absl::Status Shutdown();
  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  std::unique_ptr<Worker::Stub> stub_;
};

}  // namespace psrt

#endif  // PSRT_CHIEF_CLUSTER_CLIENTS_H_
