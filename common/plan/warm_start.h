// Warm start (TrainingJob.warm_start, TensorFlow's WarmStartSettings): the
// values of some of a job's variables taken from a committed checkpoint of
// another job, on the job's first start.
//
// The mechanism is the initializer: each warm-started variable of the plan
// gets an InitializerDef of kind TENSOR holding the source's value, so the
// stores that create it (the PS, or the workers' replicas under the mirrored
// strategies) fill it as they fill an imported model's weights, partitioned
// variables taking their rows of it. Optimizer slots and the global step are
// not in a variable's value: they start fresh, as TensorFlow's do.
//
// The source checkpoint is read with the checkpoint readers of
// common/checkpoint (every size, dtype and path checked before anything is
// allocated), for the model its manifest records.
#ifndef PSRT_COMMON_PLAN_WARM_START_H_
#define PSRT_COMMON_PLAN_WARM_START_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/job.pb.h"
#include "proto/ps_service.pb.h"
#include "proto/worker_service.pb.h"

namespace psrt {

// The fields of job.warm_start alone, at parse: a source directory, a
// vars_to_warm_start that RE2 compiles, non-empty names in
// var_name_to_prev_var_name, a step >= 0. INVALID_ARGUMENT naming the field.
// OK for a job without warm_start.
absl::Status CheckWarmStartFields(const TrainingJob& job);

// Bounds on the source job a manifest records (a manifest is read from disk:
// its model is compiled only within them), as JobLimits bound a job file.
struct WarmStartLimits {
  int max_layers = 10000;
  int max_graph_nodes = 100000;
};

struct WarmStartValues {
  std::string source;  // "the checkpoint of step S in DIR"
  int64_t step = -1;
  // This job's variable name -> the value to start it from, shaped as the
  // variable (whole, whatever the layout it was saved with).
  std::map<std::string, Tensor> values;
  // This job's variable name -> its name in the source, for each value.
  std::map<std::string, std::string> source_name;
};

// Reads what job.warm_start asks for, for the job's `variables` (its
// compiled model's): the variables whose whole name matches
// vars_to_warm_start, each from its name in var_name_to_prev_var_name (or
// its own) in the source checkpoint. Every matched variable must be in the
// source with the same kind, dtype and shape; otherwise FAILED_PRECONDITION
// naming the variable, the source checkpoint and what differs, before any
// tensor is read. INVALID_ARGUMENT when nothing matches, for a key of
// var_name_to_prev_var_name that is no matched variable, or a hash table
// matched (its rows have no whole value to start from). NOT_FOUND / DATA_LOSS
// from the readers for a missing or corrupt source.
absl::StatusOr<WarmStartValues> ReadWarmStart(const TrainingJob& job, const std::vector<VariableDef>& variables,
                                              const WarmStartLimits& limits = {});

// Sets the initializer of every variable (every shard) of `placement` that
// `warm` has a value for to kind TENSOR with that value.
void ApplyWarmStart(const WarmStartValues& warm, PlacementMap* placement);

}  // namespace psrt

#endif  // PSRT_COMMON_PLAN_WARM_START_H_
