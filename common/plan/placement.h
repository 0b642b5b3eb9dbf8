// Placement: which PS holds each variable. Greedy by bytes: the largest
// variable goes first, each to the least-loaded PS. A variable larger than
// the threshold is partitioned by rows across every PS (model
// parallelism); hash tables always spread over every PS (id mod #PS).
#ifndef PSRT_COMMON_PLAN_PLACEMENT_H_
#define PSRT_COMMON_PLAN_PLACEMENT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/ps_service.pb.h"
#include "proto/worker_service.pb.h"

namespace psrt {

// The bytes placement counts a variable as (4 a value, its whole shape).
int64_t PlacementBytes(const VariableDef& v);

absl::StatusOr<PlacementMap> PlaceVariables(const std::vector<VariableDef>& variables, int num_ps,
                                            int64_t partition_threshold_bytes);

// job.replication.factor 2: every shard's backup on the PS after its
// primary (ps_task + 1 mod num_ps), so a PS's shards all have their backup
// on one PS and it can be promoted as a whole. REQUIRES: num_ps >= 2.
void AssignBackups(PlacementMap* placement, int num_ps);

// The definitions store `store` creates (CreateVariablesRequest.variable):
// each variable placed there, with its row slice when split by rows, or
// its hash shard (hash_shard of hash_shards, the index in the shard list
// that workers route ids by) when a hash table is split.
std::vector<VariableDef> VariablesOnStore(const PlacementMap& placement, int store);

}  // namespace psrt

#endif  // PSRT_COMMON_PLAN_PLACEMENT_H_
