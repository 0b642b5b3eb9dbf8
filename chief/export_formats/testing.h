// Test helpers for the exporters: the example jobs and made-up weights.
#ifndef PSRT_CHIEF_EXPORT_FORMATS_TESTING_H_
#define PSRT_CHIEF_EXPORT_FORMATS_TESTING_H_

#include <map>
#include <string>
#include <vector>

#include "common/graph/model_compiler.h"
#include "common/plan/job_planner.h"
#include "gtest/gtest.h"

namespace psrt {
namespace testing {

// The job at `path` (runfiles-relative), or an empty job and a test failure.
inline TrainingJob LoadExample(const std::string& path) {
  auto job = LoadJob(path);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : TrainingJob();
}

// Every variable of `m`, element i holding i.
inline std::map<std::string, Tensor> Counting(const CompiledModel& m) {
  std::map<std::string, Tensor> out;
  for (const VariableDef& v : m.variables) {
    std::vector<int64_t> dims(v.shape().dim().begin(), v.shape().dim().end());
    Tensor t = Tensor::Zeros(DT_FLOAT, TensorShape(dims));
    for (int64_t i = 0; i < t.NumElements(); ++i) t.data<float>()[i] = static_cast<float>(i);
    out[v.name()] = t;
  }
  return out;
}

}  // namespace testing
}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_TESTING_H_
