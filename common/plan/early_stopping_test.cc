#include "common/plan/early_stopping.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Case {
  const char* monitor;
  EarlyStoppingDef::Mode mode;
  float min_delta;
  int patience;
  int start_from_epoch;  // in evaluations; evaluation e is at step (e + 1) * 100
  std::vector<double> values;
  int keras_stop;  // the epoch Keras stopped at, -1: never
};

// Every expectation is what Keras 3's keras.callbacks.EarlyStopping did on
// the same values (on_epoch_end(e, {monitor: v}), start_from_epoch):
// /opt/psrt/venv-tf, keras/src/callbacks/early_stopping.py.
const Case kCases[] = {
    {"accuracy", EarlyStoppingDef::MAX, 0, 0, 0, {0.5, 0.6, 0.6, 0.7}, 2},
    {"accuracy", EarlyStoppingDef::MAX, 0, 2, 0, {0.5, 0.6, 0.6, 0.59, 0.58, 0.9}, 3},
    {"accuracy", EarlyStoppingDef::MAX, 0.01f, 2, 0, {0.5, 0.505, 0.509, 0.52, 0.525, 0.529}, 2},
    {"loss", EarlyStoppingDef::MIN, 0, 1, 0, {1.0, 0.9, 0.95, 0.8}, 2},
    {"loss", EarlyStoppingDef::MIN, 0.05f, 1, 0, {1.0, 0.96, 0.5, 0.47, 0.46}, 1},
    {"loss", EarlyStoppingDef::AUTO, 0, 3, 0, {1.0, 0.9, 0.91, 0.92, 0.89, 0.95, 0.96, 0.97}, 7},
    {"accuracy", EarlyStoppingDef::MAX, 0, 0, 2, {0.9, 0.1, 0.2, 0.2}, 3},
    {"accuracy", EarlyStoppingDef::MAX, 0, 1, 0, {kNaN, 0.5, 0.6}, 1},
    {"accuracy", EarlyStoppingDef::MAX, 0, 1, 0, {0.5, kNaN, 0.6, kNaN, kNaN}, 1},
    // Improving all along: never.
    {"accuracy", EarlyStoppingDef::AUTO, 0.001f, 0, 0, {0.1, 0.2, 0.3, 0.4}, -1},
};

TEST(EarlyStoppingTest, AsKeras) {
  int n = 0;
  for (const Case& c : kCases) {
    EarlyStoppingDef def;
    def.set_monitor(c.monitor);
    def.set_mode(c.mode);
    def.set_min_delta(c.min_delta);
    def.set_patience(c.patience);
    def.set_start_from_step((c.start_from_epoch + 1) * 100);
    EarlyStopping rule(def);
    int stop = -1;
    for (int e = 0; e < static_cast<int>(c.values.size()); ++e) {
      if (rule.Observe((e + 1) * 100, c.values[e])) {
        stop = e;
        break;
      }
    }
    EXPECT_EQ(stop, c.keras_stop) << "case " << n;
    ++n;
  }
}

TEST(EarlyStoppingTest, AutoModeByMonitor) {
  EarlyStoppingDef def;
  def.set_monitor("loss");
  EXPECT_EQ(EarlyStopping(def).mode(), EarlyStoppingDef::MIN);
  def.set_monitor("accuracy");
  EXPECT_EQ(EarlyStopping(def).mode(), EarlyStoppingDef::MAX);
  def.set_monitor("auc");
  EXPECT_EQ(EarlyStopping(def).mode(), EarlyStoppingDef::MAX);
  for (const char* error : {"mae", "mean_absolute_error"}) {  // an error goes down, as Keras' direction says
    def.set_monitor(error);
    EXPECT_EQ(EarlyStopping(def).mode(), EarlyStoppingDef::MIN) << error;
  }
  def.set_monitor("accuracy");
  def.set_mode(EarlyStoppingDef::MIN);
  EXPECT_EQ(EarlyStopping(def).mode(), EarlyStoppingDef::MIN);
}

TEST(EarlyStoppingTest, WhySaysMonitorDeltaAndCount) {
  EarlyStoppingDef def;
  def.set_monitor("accuracy");
  def.set_min_delta(0.001f);
  def.set_patience(2);
  EarlyStopping rule(def);
  EXPECT_FALSE(rule.Observe(100, 0.8));
  EXPECT_FALSE(rule.Observe(200, 0.8005));
  EXPECT_TRUE(rule.Observe(300, 0.8));
  EXPECT_EQ(rule.Why(), "accuracy did not improve by 0.001 for 2 evaluations");
  EXPECT_DOUBLE_EQ(rule.best(), 0.8);
}

TEST(EarlyStoppingTest, CheckNamesTheField) {
  TrainingJob job;
  job.mutable_model()->add_metric("accuracy");
  job.mutable_eval()->set_every_steps(100);
  EarlyStoppingDef* e = job.mutable_eval()->mutable_early_stopping();
  EXPECT_TRUE(CheckEarlyStopping(job).ok());  // no monitor: none
  e->set_monitor("accuracy");
  EXPECT_TRUE(CheckEarlyStopping(job).ok());
  e->set_monitor("loss");
  EXPECT_TRUE(CheckEarlyStopping(job).ok());
  e->set_monitor("val_accuracy");
  absl::Status s = CheckEarlyStopping(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("eval.early_stopping.monitor"), std::string::npos) << s;
  e->set_monitor("accuracy");
  e->set_min_delta(-0.1f);
  EXPECT_NE(CheckEarlyStopping(job).message().find("eval.early_stopping.min_delta"), std::string::npos);
  e->set_min_delta(std::numeric_limits<float>::quiet_NaN());
  EXPECT_NE(CheckEarlyStopping(job).message().find("eval.early_stopping.min_delta"), std::string::npos);
  e->set_min_delta(std::numeric_limits<float>::infinity());
  EXPECT_NE(CheckEarlyStopping(job).message().find("eval.early_stopping.min_delta"), std::string::npos);
  e->set_min_delta(0);
  e->set_patience(-1);
  EXPECT_NE(CheckEarlyStopping(job).message().find("eval.early_stopping.patience"), std::string::npos);
  e->set_patience(0);
  e->set_start_from_step(-5);
  EXPECT_NE(CheckEarlyStopping(job).message().find("eval.early_stopping.start_from_step"), std::string::npos);
  e->set_start_from_step(0);
  job.mutable_eval()->set_every_steps(0);
  s = CheckEarlyStopping(job);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("eval.every_steps"), std::string::npos) << s;
}

}  // namespace
}  // namespace psrt
