// A compiled example job and random feeds for it: what the GPU-vs-CPU
// whole-graph test and the step benchmark both run.
#ifndef PSRT_WORKER_GPU_GRAPH_FIXTURE_H_
#define PSRT_WORKER_GPU_GRAPH_FIXTURE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph/model_compiler.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

struct CompiledJob {
  TrainingJob job;
  CompiledModel model;
  std::vector<std::string> fetches;  // loss, every gradient, every metric
};

// Loads a job file, fills its default input features and compiles it.
absl::StatusOr<CompiledJob> CompileJobFile(const std::string& path);

// Every Placeholder and Variable of `graph`, random, with unknown (batch)
// dims set to `batch`: int64 inputs are class ids below num_classes,
// variables small normal values, float inputs non-negative.
std::map<std::string, Tensor> RandomFeeds(const GraphDef& graph, int64_t batch, int num_classes, uint64_t seed);

}  // namespace psrt

#endif  // PSRT_WORKER_GPU_GRAPH_FIXTURE_H_
