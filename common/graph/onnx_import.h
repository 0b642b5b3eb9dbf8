// The ONNX front end: an onnx.ModelProto (what torch.onnx.export, tf2onnx
// and Keras' exporters write) to forward nodes of our graph IR.
//
//   ASSIGN_OR_RETURN(onnx::ModelProto m, ReadOnnxModel(path));
//   OnnxImportOptions o;
//   o.inputs["input"] = {"image", {-1, 28, 28, 1}};   // a Placeholder
//   o.outputs = {"logits"};
//   ASSIGN_OR_RETURN(OnnxImport imported, ImportOnnx(m, o, &builder));
//   // imported.outputs["logits"]: the tensor to attach a loss to.
//
// Only the nodes the requested outputs need are imported: an unused head,
// its initializers and any op it uses never reach the graph. Float
// initializers at a weight position (Gemm/MatMul/Conv operands, Add's
// bias) become Variable nodes with a VariableDef whose initializer is the
// file's tensor; other initializers and Constant nodes become Const nodes.
//
// Dim 0 of every bound input is the batch, whatever the file declares.
// Convolutions run on our NHWC kernels: an NCHW value is carried
// transposed (NHWC) between Conv, the pools, BatchNormalization,
// element-wise ops (a lower-rank operand broadcast against it is laid out
// alike) and reductions that keep its axes, and turned back into NCHW only
// where another op reads it (Flatten, Reshape, an output), so results
// equal ONNX's NCHW semantics. Weights keep the file's
// layout (Gemm [out, in], Conv OIHW), so gradients and checkpoints read as
// PyTorch's do.
//
// The file is hostile input: sizes, indices, dtypes and byte counts are
// checked before anything is allocated, and every error names the node
// (its name or index), its op and what is wrong. An op, attribute or dtype
// not supported is UNIMPLEMENTED naming the same; a malformed file is
// INVALID_ARGUMENT.
#ifndef PSRT_COMMON_GRAPH_ONNX_IMPORT_H_
#define PSRT_COMMON_GRAPH_ONNX_IMPORT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph/graph_builder.h"
#include "common/graph/op_registry.h"
#include "proto/onnx_subset.pb.h"
#include "proto/ps_service.pb.h"

namespace psrt {

// The ops ImportOnnx converts (ai.onnx domain).
std::vector<std::string> SupportedOnnxOps();

// Reads and parses an ONNX file of at most `max_bytes` (checked before
// reading). NOT_FOUND if it cannot be opened; INVALID_ARGUMENT if it is not
// an ONNX model.
absl::StatusOr<onnx::ModelProto> ReadOnnxModel(const std::string& path, int64_t max_bytes = int64_t{1} << 30);

// An ONNX tensor (an initializer, a Constant's value) as ours: FLOAT, and
// INT64 or INT32 (as int64). Checks dims, sizes and dtype before
// allocating; errors start with `what`.
absl::StatusOr<Tensor> OnnxTensor(const onnx::TensorProto& tensor, const std::string& what);

// What feeds one graph input: a tensor of our graph (a Placeholder, named
// after the input feature it reads) and its shape, batch first (-1).
// DT_INT64: ids (an INT64 or INT32 graph input), which only a Gather on a
// float initializer may read.
struct OnnxFeed {
  std::string tensor;
  Shape shape;
  DataType dtype = DT_FLOAT;
};

struct OnnxImportOptions {
  std::map<std::string, OnnxFeed> inputs;  // ONNX graph input -> its feed
  std::vector<std::string> outputs;        // ONNX values wanted (any node output)
  uint64_t seed = 0;                       // VariableDef.seed of the variables
  // How a Gather of run-time ids from a float initializer [rows, dim] (an
  // embedding lookup) holds the initializer. true: a FIXED_TABLE variable
  // fed with the rows of the batch's unique ids (the parameter-server
  // strategies pull and push it by rows), where the Gather is its only
  // reader; false (or a table read elsewhere too, as tied weights are): a
  // dense variable, looked up whole.
  bool row_tables = false;
};

// A table pulled by rows: its Variable node (shape [-1, dim], attr
// "feature") is fed the rows of the unique ids of `feature`, `index` (an
// int64 Placeholder shaped as the ids) each id's position among them.
struct OnnxTable {
  std::string feature;
  std::string index;
};

struct OnnxImport {
  std::map<std::string, std::string> outputs;  // ONNX value -> our tensor
  std::map<std::string, Shape> output_shapes;
  std::vector<VariableDef> variables;          // in the order first used
  std::map<std::string, std::string> variable_of;  // ONNX initializer -> the variable it became
  std::map<std::string, OnnxTable> tables;         // variable -> its ids, where row_tables made one
  // Moving-average variables (a BatchNormalization's running mean and
  // variance) -> the batch statistic a step reports for each in place of a
  // gradient.
  std::map<std::string, std::string> moving_statistics;
};

// Adds the forward nodes to `builder`'s graph. REQUIRES: every graph input
// the outputs need is in options.inputs (an input that is also an
// initializer needs no feed).
absl::StatusOr<OnnxImport> ImportOnnx(const onnx::ModelProto& model, const OnnxImportOptions& options,
                                      GraphBuilder* builder);

}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_ONNX_IMPORT_H_
