// The layer-list front end: a job's SequentialModel (or raw GraphDef) to a
// training graph with loss, metrics and the gradient of every variable.
//
// Inputs are Placeholder nodes named after the job's input features (a
// DENSE feature "image" is [?, 28, 28, 1]) plus "label" (int64 [?] when
// input.num_classes > 0, else float [?]). Dense variables are Variable
// nodes fed with pulled values. An embedding table is a Variable node fed
// with the pulled rows of the batch's unique ids, [?, dim], with two more
// placeholders per table: "<layer>/index" (each id's row among the unique
// ones) and "<layer>/row_splits" (the feature's ragged row splits). A
// DENSE feature of dtype DT_INT64 is an int64 placeholder; an ONNX model's
// Gather of its ids is a table with "<variable>/index" only (under the
// parameter-server and hybrid strategies; see OnnxImportOptions.row_tables).
#ifndef PSRT_COMMON_GRAPH_MODEL_COMPILER_H_
#define PSRT_COMMON_GRAPH_MODEL_COMPILER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/graph.pb.h"
#include "proto/job.pb.h"
#include "proto/ps_service.pb.h"

namespace psrt {

struct TableInput {
  std::string feature;     // the SPARSE input feature whose ids it reads (or DENSE ids feature)
  std::string index;       // placeholder node: int64 [nnz] (an imported Gather's: shaped as its ids)
  std::string row_splits;  // placeholder node: int64 [batch + 1]; "" for an imported Gather
};

struct CompiledModel {
  GraphDef graph;  // pruned to loss, gradients, metrics and logits
  std::vector<VariableDef> variables;
  std::string logits;
  std::string loss;
  std::map<std::string, std::string> gradients;  // variable -> tensor
  std::map<std::string, std::string> metrics;    // "accuracy" -> tensor
  std::map<std::string, TableInput> tables;      // table variable -> its input
  // model.onnx: each initializer that became a variable, by its ONNX name
  // (what an export back to ONNX writes the trained values into).
  std::map<std::string, std::string> onnx_initializers;
};

// The name a layer of a sequential model goes by: its own, or
// "<kind>_<index>" ("dense_1"); its variables are "<name>/kernel" etc.
std::string LayerName(const LayerDef& layer, int index);

// job.input.feature must be filled (worker/input/source.h FillDefaultFeatures
// gives each format's default). Errors name the layer (index and name) at
// fault.
absl::StatusOr<CompiledModel> CompileModel(const TrainingJob& job);

// model.metric by Keras' names: accuracy, top_k_accuracy (k = 5),
// top_<K>_accuracy, mae / mean_absolute_error (a MEAN_SQUARED_ERROR loss),
// precision, recall and auc (a SIGMOID_CROSS_ENTROPY loss on one output).
// INVALID_ARGUMENT naming the metric and listing the known ones for one
// unknown, one that does not fit the loss, or one listed twice. Needs no
// compiling (CompileModel also checks the model's output shape).
absl::Status CheckMetrics(const ModelDef& model);

}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_MODEL_COMPILER_H_
