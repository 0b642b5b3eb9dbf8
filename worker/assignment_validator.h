// Every field of a worker assignment checked before the worker allocates or
// starts anything: a Start comes over the network, and one bad field (the
// label named as the loss, a batch of 2^31 examples, a PS index out of the
// cluster, a shard past its variable's rows) used to abort or crash the
// worker. Errors are INVALID_ARGUMENT naming the field.
#ifndef PSRT_WORKER_ASSIGNMENT_VALIDATOR_H_
#define PSRT_WORKER_ASSIGNMENT_VALIDATOR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/worker_service.pb.h"

namespace psrt {

struct AssignmentLimits {
  int num_ps = 0;                   // PS tasks in this worker's cluster spec
  int max_batch_size = 1 << 20;     // examples
  int max_shards = 1 << 16;         // workers sharing the data
  int max_local_devices = 64;       // device replicas of a mirrored strategy (the daemon: its cores)
  // Refuse a collective group (the ring all-reduce): under TLS the ring's
  // gradients would travel unencrypted (authenticated by the token's MAC
  // only) while the rest is encrypted, unless the worker was told that is
  // meant (--allow_plaintext_collective).
  bool refuse_plaintext_collective = false;
  // Set by ValidateAssignment for an assignment with a collective group:
  // every variable is in the worker's own replica.
  bool mirrored = false;
};

absl::Status ValidateAssignment(const WorkerAssignment& a, const AssignmentLimits& limits);

// The PS addresses a worker reaches: its spec's (`spec`), then those of PS
// that joined the running job beyond the spec (job.failure.max_ps), from
// the assignment's `ps` list: ps:N, ps:N+1, ... while they follow without
// a gap and their address is a plausible host:port (anything else there
// is ignored, so a placement naming it is refused by ValidateAssignment).
std::vector<std::string> PsAddresses(const WorkerAssignment& a, std::vector<std::string> spec);

}  // namespace psrt

#endif  // PSRT_WORKER_ASSIGNMENT_VALIDATOR_H_
