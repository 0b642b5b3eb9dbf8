// Every field of a worker assignment checked before the worker allocates or
// starts anything: a Start comes over the network, and one bad field (the
// label named as the loss, a batch of 2^31 examples, a PS index out of the
// cluster, a shard past its variable's rows) used to abort or crash the
// worker. Errors are INVALID_ARGUMENT naming the field.
#ifndef PSRT_WORKER_ASSIGNMENT_VALIDATOR_H_
#define PSRT_WORKER_ASSIGNMENT_VALIDATOR_H_

#include "absl/status/status.h"
#include "proto/worker_service.pb.h"

namespace psrt {

struct AssignmentLimits {
  int num_ps = 0;                   // PS tasks in this worker's cluster spec
  int max_batch_size = 1 << 20;     // examples
  int max_shards = 1 << 16;         // workers sharing the data
  int max_local_devices = 64;       // device replicas of a mirrored strategy (the daemon: its cores)
  // Set by ValidateAssignment for an assignment with a collective group:
  // every variable is in the worker's own replica.
  bool mirrored = false;
};

absl::Status ValidateAssignment(const WorkerAssignment& a, const AssignmentLimits& limits);

}  // namespace psrt

#endif  // PSRT_WORKER_ASSIGNMENT_VALIDATOR_H_
