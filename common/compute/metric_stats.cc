#include "common/compute/metric_stats.h"

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

bool IsRatioOp(const std::string& op) {
  return op == "Accuracy" || op == "TopKAccuracy" || op == "MeanAbsoluteError" || op == "Precision" ||
         op == "Recall";
}

double DivNoNan(double a, double b) { return b == 0 ? 0.0 : a / b; }

}  // namespace

bool IsMetricOp(const std::string& op) { return IsRatioOp(op) || op == "Auc"; }

absl::Status MetricStats::Add(const std::vector<double>& batch) {
  if (sums.empty()) sums.assign(batch.size(), 0.0);
  if (batch.size() != sums.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " statistics of ", batch.size(), " values added to ", sums.size()));
  }
  for (size_t i = 0; i < batch.size(); ++i) sums[i] += batch[i];
  return absl::OkStatus();
}

absl::StatusOr<double> FinishMetric(const MetricStats& stats) {
  const std::vector<double>& s = stats.sums;
  if (IsRatioOp(stats.op)) {
    if (s.size() != 2) return absl::InvalidArgumentError(absl::StrCat(stats.op, " needs 2 statistics, got ", s.size()));
    return DivNoNan(s[0], s[1]);
  }
  if (stats.op == "Auc") {
    if (s.empty() || s.size() % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("Auc needs 4 statistics per threshold, got ", s.size()));
    }
    // As keras.metrics.AUC(curve="ROC", summation_method="interpolation"):
    // the trapezoids between consecutive thresholds' (fpr, tpr) points.
    const size_t t = s.size() / 4;
    const double* tp = s.data();
    const double* fp = tp + t;
    const double* tn = fp + t;
    const double* fn = tn + t;
    double auc = 0;
    for (size_t i = 0; i + 1 < t; ++i) {
      const double tpr0 = DivNoNan(tp[i], tp[i] + fn[i]), tpr1 = DivNoNan(tp[i + 1], tp[i + 1] + fn[i + 1]);
      const double fpr0 = DivNoNan(fp[i], fp[i] + tn[i]), fpr1 = DivNoNan(fp[i + 1], fp[i + 1] + tn[i + 1]);
      auc += (fpr0 - fpr1) * (tpr0 + tpr1) / 2;
    }
    return auc;
  }
  return absl::InvalidArgumentError(absl::StrCat(stats.op, " is no metric op"));
}

}  // namespace psrt
