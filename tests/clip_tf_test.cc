// Gradient clipping against TensorFlow: one step's gradients (dense ones of
// several shapes and sizes, one sparse (ids, rows) gradient of an embedding
// table) are clipped by psrt's ClippingStepRunner, through RunStreaming as
// the worker's bucketed push calls it and through Run, and by TensorFlow
// 2.21 (tests/tools/tf_clip.py under /opt/psrt/venv-tf: tf.clip_by_norm,
// tf.clip_by_value, tf.clip_by_global_norm, the sparse gradient as a
// tf.IndexedSlices). Every element agrees within 1e-6 relative; the worst
// difference is printed as a FIGURE line.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/compute/clipping_step_runner.h"
#include "common/compute/gradient_clipping.h"
#include "common/testing/python_tool.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

struct Mode {
  std::string name;
  std::string kind;  // clipnorm | clipvalue | global_clipnorm
  float value;
  GradientClipping Clip() const {
    GradientClipping c;
    if (kind == "clipnorm") c.set_clipnorm(value);
    if (kind == "clipvalue") c.set_clipvalue(value);
    if (kind == "global_clipnorm") c.set_global_clipnorm(value);
    return c;
  }
};

// Deterministic values of varied signs and magnitudes (`scale`).
Tensor Values(TensorShape shape, float scale, int salt) {
  Tensor t(DT_FLOAT, std::move(shape));
  float* d = t.data<float>();
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    d[i] = scale * std::sin(0.731f * static_cast<float>(i) + 1.3f * salt) * (1.0f + 0.5f * std::cos(0.017f * i));
  }
  return t;
}

// One step's gradients: the backward pass makes the dense ones last layer
// first; the embedding's gradient is its batch's rows.
class FixedRunner : public StepRunner {
 public:
  FixedRunner() {
    dense_.emplace_back("dense_1/bias", Values(TensorShape({10}), 0.02f, 1));       // norm ~0.06: within most bounds
    dense_.emplace_back("dense_1/kernel", Values(TensorShape({64, 10}), 0.3f, 2));  // norm ~8
    dense_.emplace_back("dense/bias", Values(TensorShape({64}), 2.0f, 3));          // elements past 0.5
    dense_.emplace_back("dense/kernel", Values(TensorShape({128, 64}), 0.05f, 4));  // norm ~4.5
    dense_.emplace_back("scale", Values(TensorShape({}), 0.7f, 5));                 // a scalar
    ids_ = Tensor::FromVector<int64_t>({3, 17, 42, 5, 99}, TensorShape({5}));
    rows_ = Values(TensorShape({5, 16}), 1.5f, 6);
  }
  std::vector<std::string> DenseVariables() const override {
    std::vector<std::string> v;
    for (const auto& [name, g] : dense_) v.push_back(name);
    return v;
  }
  absl::StatusOr<RowRequest> SparseRows(const Batch&) const override { return RowRequest{}; }
  absl::StatusOr<StepResult> Run(const TensorMap&, const TensorMap&, const Batch&, int64_t) override {
    StepResult r = Sparse();
    for (const auto& [name, g] : dense_) r.dense_gradients[name] = g;
    return r;
  }
  absl::StatusOr<StepResult> RunStreaming(const TensorMap&, const TensorMap&, const Batch&, int64_t,
                                          const GradientReady& ready) override {
    for (const auto& [name, g] : dense_) ready(name, g);
    return Sparse();
  }
  std::string device() const override { return "fixed"; }

  // The files tf_clip.py reads.
  void Write(const std::string& dir) const {
    std::ofstream list(dir + "/gradients.txt");
    int i = 0;
    for (const auto& [name, g] : dense_) {
      const std::string file = absl::StrCat("g", i++, ".f32");
      WriteRaw(dir + "/" + file, g);
      std::vector<int64_t> dims;
      for (int d = 0; d < g.shape().rank(); ++d) dims.push_back(g.shape().dim(d));
      list << "dense " << name << " " << file << " " << (dims.empty() ? "-" : absl::StrJoin(dims, ",")) << "\n";
    }
    WriteRaw(dir + "/ids.i64", ids_);
    WriteRaw(dir + "/rows.f32", rows_);
    list << "sparse embedding ids.i64 rows.f32 100 16\n";
  }

 private:
  static void WriteRaw(const std::string& path, const Tensor& t) {
    std::ofstream out(path, std::ios::binary);
    out.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.TotalBytes()));
  }
  StepResult Sparse() const {
    StepResult r;
    r.sparse_gradients["embedding"] = {ids_, rows_};
    return r;
  }
  std::vector<std::pair<std::string, Tensor>> dense_;
  Tensor ids_, rows_;
};

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

TEST(ClipTfTest, ClippingMatchesTensorFlowInEveryMode) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/clip_tf";
  std::filesystem::create_directories(dir + "/in");
  FixedRunner fixed;
  fixed.Write(dir + "/in");
  const std::vector<Mode> modes = {
      {"clipnorm_1", "clipnorm", 1.0f},  // clips all but dense_1/bias
      {"clipnorm_5", "clipnorm", 5.0f},  // clips some, leaves others
      {"clipvalue_0_5", "clipvalue", 0.5f},    {"clipvalue_0_01", "clipvalue", 0.01f},
      {"global_1", "global_clipnorm", 1.0f},    // clips everything together
      {"global_1e4", "global_clipnorm", 1e4f},  // within the bound: untouched
  };
  {
    std::ofstream m(dir + "/in/modes.txt");
    for (const Mode& mode : modes)
      m << mode.name << " " << mode.kind << " " << absl::StrFormat("%.9g", mode.value) << "\n";
  }
  ASSERT_TRUE(
      testing::RunPythonTool("tests/tools/tf_clip.py", {dir + "/in", dir + "/out"}, "", testing::kVenvTfPython).ok());

  double worst = 0;
  std::string worst_at;
  int64_t elements = 0, clipped_elements = 0;
  for (const Mode& mode : modes) {
    // Both ways the worker calls the runner.
    auto runner = MaybeClipGradients(std::make_unique<FixedRunner>(), mode.Clip());
    TensorMap streamed;
    absl::StatusOr<StepResult> s =
        runner->RunStreaming({}, {}, Batch{}, 0, [&](const std::string& v, const Tensor& g) { streamed[v] = g; });
    ASSERT_TRUE(s.ok()) << s.status();
    absl::StatusOr<StepResult> r = runner->Run({}, {}, Batch{}, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    StepResult unclipped = *FixedRunner().Run({}, {}, Batch{}, 0);
    std::vector<std::pair<std::string, std::vector<const Tensor*>>> ours;  // name -> [streamed, run, original]
    for (const auto& [v, g] : r->dense_gradients) {
      ours.push_back({v, {&streamed.at(v), &g, &unclipped.dense_gradients.at(v)}});
    }
    ours.push_back({"embedding",
                    {&s->sparse_gradients.at("embedding").second, &r->sparse_gradients.at("embedding").second,
                     &unclipped.sparse_gradients.at("embedding").second}});
    for (const auto& [v, tensors] : ours) {
      const std::vector<float> tf =
          ReadFloats(absl::StrCat(dir, "/out/", mode.name, "/", absl::StrReplaceAll(v, {{"/", "_"}}), ".f32"));
      for (const Tensor* t : tensors) ASSERT_EQ(t->NumElements(), static_cast<int64_t>(tf.size())) << v;
      for (size_t i = 0; i < tf.size(); ++i) {
        for (int k = 0; k < 2; ++k) {
          const float a = tensors[k]->data<float>()[i];
          const double diff =
              std::abs(static_cast<double>(a) - tf[i]) / std::max(std::abs(static_cast<double>(tf[i])), 1e-30);
          if (diff > worst) {
            worst = diff;
            worst_at = absl::StrCat(mode.name, " ", v, "[", i, "] ", k == 0 ? "streamed" : "run", ": ",
                                    absl::StrFormat("%.9g vs %.9g", a, tf[i]));
          }
          EXPECT_LE(diff, 1e-6) << mode.name << " " << v << "[" << i << "] " << (k == 0 ? "streamed" : "run") << ": "
                                << a << " vs TensorFlow's " << tf[i];
        }
        ++elements;
        clipped_elements += tensors[2]->data<float>()[i] != tf[i];
      }
    }
  }
  // The cases are not vacuous: TensorFlow changed most of the elements.
  EXPECT_GT(clipped_elements, elements / 2);
  std::cout << "FIGURE: clipping vs TensorFlow " << absl::StrFormat("%.3g", worst) << " worst relative difference ("
            << worst_at << ") over " << elements << " elements x 2 paths, " << modes.size() << " modes, "
            << clipped_elements << " elements changed by clipping" << std::endl;
}

}  // namespace
}  // namespace psrt
