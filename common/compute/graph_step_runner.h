// GraphStepRunner: the StepRunner of a compiled graph, on the CPU kernels
// or (when chosen, see device_select.h) the GPU ones.
// Used by the worker daemon, the chief's evaluation and the in-process
// trainer alike, so all three compute the same way.
//
// Feeds: each input feature's placeholder, "label", every dense variable,
// and per embedding table its pulled rows with "<layer>/index" (each id's
// position among the batch's unique ids) and "<layer>/row_splits" (for an
// EmbeddingBag; an EmbeddingLookup of an imported model's ids has only the
// index, shaped as the ids). An id outside a fixed table's rows is refused
// before any row is asked for, naming the feature and the table.
// Fetches: the loss, the metrics and every variable's gradient; a table's
// gradient is returned as (unique ids, rows).
#ifndef PSRT_COMMON_COMPUTE_GRAPH_STEP_RUNNER_H_
#define PSRT_COMMON_COMPUTE_GRAPH_STEP_RUNNER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/worker_service.pb.h"
#include "common/compute/metric_stats.h"
#include "common/compute/step_executor.h"
#include "common/compute/step_runner.h"

namespace psrt {

struct TableFeed {
  std::string variable;    // the table's Variable node
  std::string feature;     // the batch's sparse feature, or id feature (an EmbeddingLookup's)
  std::string index;       // placeholder nodes
  std::string row_splits;  // "" for an EmbeddingLookup (ids of a fixed shape)
  int64_t rows = 0;        // a FIXED_TABLE's: ids must be in [0, rows); 0 = a hash table
};

class GraphStepRunner : public StepRunner {
 public:
  // Makes the executor of the step's graph on some device; the worker
  // passes its device choice (worker/device_select.h) this way.
  using ExecutorFactory =
      std::function<absl::StatusOr<std::unique_ptr<StepExecutor>>(const GraphDef& graph, int threads)>;

  // From a worker assignment: its graph, loss, gradients, metrics. Without
  // a factory the step runs on the CPU executor with `threads` threads.
  static absl::StatusOr<std::unique_ptr<GraphStepRunner>> Create(const WorkerAssignment& a,
                                                                 int threads = 0,
                                                                 const ExecutorFactory& make = nullptr);

  std::vector<std::string> DenseVariables() const override { return dense_; }
  absl::StatusOr<RowRequest> SparseRows(const Batch& batch) const override;
  absl::StatusOr<StepResult> Run(const TensorMap& dense, const TensorMap& rows,
                                 const Batch& batch, int64_t step) override;
  absl::StatusOr<StepResult> RunStreaming(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                          int64_t step, const GradientReady& ready) override;
  std::string device() const override { return device_; }

  // One batch's evaluation: its mean loss and each metric's statistics
  // (see metric_stats.h), to be summed over batches and finished once.
  struct BatchEvaluation {
    float loss = 0;
    std::map<std::string, MetricStats> metrics;  // by metric node name
  };

  // Loss and metric statistics of a batch without gradients (training off:
  // dropout passes through). For a table, `rows` holds the whole table and
  // ids are used as rows.
  absl::StatusOr<BatchEvaluation> Evaluate(const TensorMap& variables, const Batch& batch);
  // The same with each table's rows for the batch's unique ids, in the
  // order SparseRows gives them (as a training step is fed).
  absl::StatusOr<BatchEvaluation> EvaluateRows(const TensorMap& dense, const TensorMap& rows, const Batch& batch);

 private:
  GraphStepRunner() = default;
  // Run, with dense gradients handed to `ready` when it is set.
  absl::StatusOr<StepResult> RunImpl(const TensorMap& dense, const TensorMap& rows, const Batch& batch,
                                     int64_t step, const GradientReady* ready);
  absl::StatusOr<BatchEvaluation> EvaluateFeeds(const std::map<std::string, Tensor>& feeds);
  absl::StatusOr<std::map<std::string, Tensor>> Feeds(const TensorMap& dense, const TensorMap& rows,
                                                      const Batch& batch, bool whole_tables,
                                                      std::map<std::string, Tensor>* unique_ids) const;

  std::unique_ptr<StepExecutor> exec_;
  std::vector<std::string> dense_;
  std::vector<TableFeed> tables_;
  std::vector<std::string> inputs_;  // placeholder nodes fed from the batch
  std::string loss_;
  std::vector<std::pair<std::string, std::string>> grads_;    // variable, tensor
  struct MetricFetch {
    std::string name;    // the metric node's
    std::string tensor;  // fetched
    std::string op;      // a metric op (metric_stats.h)
  };
  std::vector<MetricFetch> metrics_;
  std::string device_ = "cpu";
  uint64_t seed_ = 0;
};

}  // namespace psrt

#endif  // PSRT_COMMON_COMPUTE_GRAPH_STEP_RUNNER_H_
