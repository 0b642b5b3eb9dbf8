// Evaluation metrics as sufficient statistics.
//
// Every metric op (Accuracy, TopKAccuracy, MeanAbsoluteError, Precision,
// Recall, Auc) outputs, per batch, a float vector of sums and counts rather
// than the batch's value. Summing those vectors over batches and finishing
// once gives the metric over the whole split, exactly, whatever the batch
// size (precision is the ratio of the summed counts, not a mean of the
// batches' ratios). A training step shows its batch's value: the batch's
// statistics finished alone.
//
//   ratio ops (all but Auc): [numerator, denominator]; the value is their
//     ratio, 0 when the denominator is 0 (Keras' divide_no_nan).
//   Auc (num_thresholds T): [tp[0..T), fp[0..T), tn[0..T), fn[0..T)], the
//     confusion counts at each threshold; the value is the ROC AUC by
//     Keras' default trapezoid ("interpolation") rule.
#ifndef PSRT_COMMON_COMPUTE_METRIC_STATS_H_
#define PSRT_COMMON_COMPUTE_METRIC_STATS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psrt {

// Whether `op` is a metric op (its output is statistics to sum).
bool IsMetricOp(const std::string& op);

// The statistics of one metric, summed over any number of batches.
struct MetricStats {
  std::string op;
  std::vector<double> sums;

  // Adds another batch's statistics of the same op; INVALID_ARGUMENT when
  // their lengths differ.
  absl::Status Add(const std::vector<double>& batch);
};

// The metric's value from its summed statistics; INVALID_ARGUMENT for an op
// that is no metric or statistics of the wrong length.
absl::StatusOr<double> FinishMetric(const MetricStats& stats);

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_METRIC_STATS_H_
