// How a request names the store and placement epoch it is for when the job
// replicates its PS shards (job.replication.factor 2): three gRPC metadata
// entries beside the request, so that the data path's wire format
// (ps_wire.h) stays as it is and a job without replication sends none.
//
//   psrt-store    the store (placement ps_task) the request is for
//   psrt-epoch    the placement epoch the sender routes by
//   psrt-replica  "1": a push a primary forwards to its backup
#ifndef PSRT_COMMON_TRANSPORT_REPLICA_HEADER_H_
#define PSRT_COMMON_TRANSPORT_REPLICA_HEADER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"

namespace psrt {

struct ReplicaHeader {
  bool present = false;  // the request carried a store and an epoch
  int store = 0;
  int64_t epoch = 0;
  bool replica = false;  // a primary's forwarded push
};

// Adds the header to an outgoing call.
void AddReplicaHeader(grpc::ClientContext* ctx, int store, int64_t epoch, bool replica = false);

// The header of an incoming call; absent entries give present = false.
// INVALID_ARGUMENT naming the entry when one is not a number in range (a
// store below 0, an epoch below 1), or only one of store and epoch is set.
absl::StatusOr<ReplicaHeader> ReadReplicaHeader(const grpc::ServerContextBase& ctx);

}  // namespace psrt

#endif  // PSRT_COMMON_TRANSPORT_REPLICA_HEADER_H_
