// Helpers for tests that run single ops through an executor: random
// tensors, and the Variable / Placeholder nodes that feed an op.
#ifndef PSRT_COMMON_COMPUTE_OP_TEST_UTIL_H_
#define PSRT_COMMON_COMPUTE_OP_TEST_UTIL_H_

#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/graph/graph_builder.h"
#include "common/tensor.h"

namespace psrt {

// Uniform in [lo, hi).
inline Tensor RandomTensor(TensorShape shape, std::mt19937* rng, float lo = -1, float hi = 1) {
  Tensor t(DT_FLOAT, std::move(shape));
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = u(*rng);
  return t;
}

// A Variable node per `variables` entry (the ones to differentiate) and a
// Placeholder per `constants` entry, shaped like the tensors; returns the
// variable names. *feeds gets both.
inline std::vector<std::string> AddFedInputs(GraphBuilder* b, const std::map<std::string, Tensor>& variables,
                                             const std::map<std::string, Tensor>& constants,
                                             std::map<std::string, Tensor>* feeds) {
  std::vector<std::string> vars;
  for (const auto& [name, t] : variables) {
    b->Add("Variable", name, {}, {{"shape", AttrShape(t.shape().dims())}, {"dtype", AttrType(DT_FLOAT)}});
    vars.push_back(name);
  }
  for (const auto& [name, t] : constants) {
    b->Add("Placeholder", name, {}, {{"shape", AttrShape(t.shape().dims())}, {"dtype", AttrType(t.dtype())}});
  }
  *feeds = variables;
  feeds->insert(constants.begin(), constants.end());
  return vars;
}

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_OP_TEST_UTIL_H_
