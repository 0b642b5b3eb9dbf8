// Every update rule of common/optimizer against Keras 3's own optimizer with
// the same hyper-parameters: tests/tools/keras_optimizer_steps.py runs
// keras.optimizers.{SGD, Adagrad, Adam, AdamW, RMSprop} (TensorFlow backend,
// /opt/psrt/venv-tf) for six steps from one initial variable and gradient
// sequence, and writes both with Keras' variable after each step; here our
// rules run the same steps and every element of every step must agree
// within 1e-6 + 1e-5 * |keras|. The slots must be Keras' too (names and
// order), except Adam's and AdamW's, which keep TF's "m", "v" for Keras'
// "momentum", "velocity". Prints the worst difference per rule as FIGURE
// lines.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/optimizer.h"
#include "common/testing/python_tool.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

struct Rule {
  std::string name;
  std::string psrt;                  // OptimizerDef text
  std::vector<std::string> slots;    // Keras' slot names
  std::vector<std::vector<float>> after;  // Keras' variable after step t+1
};

struct Steps {
  std::vector<float> init;
  std::vector<std::vector<float>> grads;
  std::vector<Rule> rules;
};

std::vector<float> Floats(std::istringstream& in) {
  std::vector<float> v;
  std::string tok;
  while (in >> tok) v.push_back(std::strtof(tok.c_str(), nullptr));
  return v;
}

Steps Read(const std::string& path) {
  Steps s;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "init") {
      s.init = Floats(in);
    } else if (key == "grad") {
      int step;
      in >> step;
      s.grads.push_back(Floats(in));
      EXPECT_EQ(step, static_cast<int>(s.grads.size()));
    } else if (key == "rule") {
      s.rules.emplace_back();
      in >> s.rules.back().name;
    } else if (key == "psrt") {
      s.rules.back().psrt = line.substr(line.find(' ') + 1);
    } else if (key == "slots") {
      s.rules.back().slots = absl::StrSplit(line.substr(5), ' ', absl::SkipEmpty());
    } else if (key == "after") {
      int step;
      in >> step;
      s.rules.back().after.push_back(Floats(in));
      EXPECT_EQ(step, static_cast<int>(s.rules.back().after.size()));
    }
  }
  return s;
}

TEST(KerasOptimizerTest, EveryRuleMatchesKerasOverSixSteps) {
  const std::string out = absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                                       "/keras_optimizer_steps.txt");
  absl::Status run = testing::RunPythonTool("tests/tools/keras_optimizer_steps.py", {"--out=" + out}, "",
                                            testing::kVenvTfPython);
  ASSERT_TRUE(run.ok()) << run;
  const Steps steps = Read(out);
  ASSERT_EQ(steps.grads.size(), 6u);
  ASSERT_FALSE(steps.init.empty());
  const int64_t n = static_cast<int64_t>(steps.init.size());
  // Every rule the table asks for (the tool's list and this test's agree).
  std::vector<std::string> names;
  for (const Rule& r : steps.rules) names.push_back(r.name);
  for (const char* want : {"sgd", "momentum", "nesterov", "adagrad", "adam", "adamw", "adamw_wd0.1", "rmsprop",
                           "rmsprop_centered", "rmsprop_momentum"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }

  const std::map<std::string, std::string> kTfSlotNames = {{"m", "momentum"}, {"v", "velocity"}};
  for (const Rule& rule : steps.rules) {
    SCOPED_TRACE(rule.name);
    OptimizerDef def;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(rule.psrt, &def)) << rule.psrt;
    absl::StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(def);
    ASSERT_TRUE(opt.ok()) << opt.status();
    std::vector<std::string> ours = (*opt)->slot_names();
    for (std::string& s : ours) {
      if (auto it = kTfSlotNames.find(s); it != kTfSlotNames.end()) s = it->second;
    }
    EXPECT_EQ(ours, rule.slots);
    ASSERT_EQ(rule.after.size(), steps.grads.size());

    std::vector<float> var = steps.init;
    std::vector<std::vector<float>> slots;
    std::vector<float*> ptrs;
    for (int i = 0; i < (*opt)->num_slots(); ++i) slots.emplace_back(n, (*opt)->slot_initial_value(i));
    for (auto& s : slots) ptrs.push_back(s.data());
    double worst = 0, worst_ratio = 0;
    std::string where = "-";
    int bad = 0;
    for (size_t t = 0; t < steps.grads.size(); ++t) {
      ASSERT_EQ(static_cast<int64_t>(steps.grads[t].size()), n);
      ASSERT_EQ(static_cast<int64_t>(rule.after[t].size()), n);
      (*opt)->Apply(var.data(), steps.grads[t].data(), n, ptrs.data(), static_cast<int64_t>(t + 1));
      for (int64_t i = 0; i < n; ++i) {
        const double keras = rule.after[t][i];
        const double diff = std::fabs(var[i] - keras);
        const double allowed = 1e-6 + 1e-5 * std::fabs(keras);
        if (diff > allowed && ++bad <= 5) {
          ADD_FAILURE() << "step " << t + 1 << " element " << i << ": ours " << var[i] << ", Keras " << keras;
        }
        if (diff > worst) {
          worst = diff;
          where = absl::StrFormat("step %d element %d, Keras %.9g", t + 1, i, keras);
        }
        worst_ratio = std::max(worst_ratio, diff / allowed);
      }
    }
    EXPECT_EQ(bad, 0);
    std::cout << absl::StrFormat("FIGURE: keras_optimizer %s: worst |ours - keras| %.3g (%s), %.3g of the tolerance\n",
                                 rule.name, worst, where, worst_ratio);
  }
}

}  // namespace
}  // namespace psrt
