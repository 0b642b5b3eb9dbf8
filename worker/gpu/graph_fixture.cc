#include "worker/gpu/graph_fixture.h"

#include <cmath>
#include <random>

#include "common/plan/job_planner.h"
#include "common/graph/graph_builder.h"
#include "common/status_macros.h"
#include "common/input/source.h"

namespace psrt {

absl::StatusOr<CompiledJob> CompileJobFile(const std::string& path) {
  CompiledJob c;
  ASSIGN_OR_RETURN(c.job, LoadJob(path));
  RETURN_IF_ERROR(FillDefaultFeatures(c.job.mutable_input()));
  ASSIGN_OR_RETURN(c.model, CompileModel(c.job));
  c.fetches.push_back(c.model.loss);
  for (const auto& [v, grad] : c.model.gradients) c.fetches.push_back(grad);
  for (const auto& [m, t] : c.model.metrics) c.fetches.push_back(t);
  return c;
}

std::map<std::string, Tensor> RandomFeeds(const GraphDef& graph, int64_t batch, int num_classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::uniform_int_distribution<int64_t> cls(0, std::max(1, num_classes) - 1);
  std::map<std::string, Tensor> feeds;
  for (const NodeDef& n : graph.node()) {
    if (n.op() != "Placeholder" && n.op() != "Variable") continue;
    std::vector<int64_t> dims = GetAttrShape(n, "shape");
    for (int64_t& d : dims) {
      if (d < 0) d = batch;
    }
    auto it = n.attr().find("dtype");
    DataType dtype = it != n.attr().end() ? it->second.type() : DT_FLOAT;
    Tensor t(dtype, TensorShape(dims));
    for (int64_t i = 0; i < t.NumElements(); ++i) {
      if (dtype == DT_INT64) {
        t.data<int64_t>()[i] = cls(rng);
      } else {
        t.data<float>()[i] = n.op() == "Variable" ? normal(rng) : std::fabs(normal(rng)) * 5;
      }
    }
    feeds[n.name()] = t;
  }
  return feeds;
}

}  // namespace psrt
