// A task's job identity (proto JobIdentity: --job_name and its cluster
// spec) and the chief's check of a registering task against its own.
//
//   JobIdentity mine = MakeJobIdentity(config.job_name, config.cluster);
//   absl::Status s = CheckSameJob(mine, request.job(), request.task().task());
//   if (!s.ok()) return s;  // PERMISSION_DENIED naming both
#ifndef PSRT_COMMON_JOB_IDENTITY_H_
#define PSRT_COMMON_JOB_IDENTITY_H_

#include <string>

#include "absl/status/status.h"
#include "common/cluster_spec.h"
#include "proto/cluster.pb.h"

namespace psrt {

JobIdentity MakeJobIdentity(const std::string& job_name, const ClusterSpec& cluster);

// 16 hex digits (FNV-1a 64 of the spec's TensorFlow JSON): a short name for
// a spec in messages. Not a security check.
std::string ClusterDigest(const ClusterDef& cluster);

// OK when `task_identity` (the registering task `task`'s) belongs to the job
// of `chief_identity`: equal names, the same chief address, and the same
// address for every task both specs name (either may name more tasks: an
// elastic joiner's spec names workers or PS the chief's does not).
// Otherwise PERMISSION_DENIED naming the task, both jobs or both specs
// (digest and the first task whose address differs), and what to fix. The
// task's words in it are escaped and bounded (it is logged as is).
absl::Status CheckSameJob(const JobIdentity& chief_identity, const JobIdentity& task_identity, const TaskId& task);

}  // namespace psrt

#endif  // PSRT_COMMON_JOB_IDENTITY_H_
