// Fuzzes the ONNX importer (common/graph/onnx_import.h): the bytes of a
// model file, parsed as the chief parses one, imported against a feed built
// from its first graph input, then differentiated (a sum of the output
// against every variable) and checked by the executor's shape inference.
// Everything a file controls (dims, dtypes, attributes, shape arithmetic,
// initializer bytes) must end in an error or a graph, never a crash, a
// CHECK or an allocation the file sized.
#include <cstdint>
#include <string>

#include "common/compute/executor.h"
#include "common/graph/graph_analysis.h"
#include "common/graph/onnx_import.h"
#include "google/protobuf/io/coded_stream.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  google::protobuf::io::CodedInputStream stream(data, static_cast<int>(size));
  stream.SetTotalBytesLimit(static_cast<int>(size));
  psrt::onnx::ModelProto model;
  if (!model.ParseFromCodedStream(&stream) || model.graph().input_size() == 0) return 0;
  // The feed the job's feature would give the first input: its declared
  // dims with the batch unknown (a file's odd dims are the importer's to refuse).
  const psrt::onnx::ValueInfoProto& in = model.graph().input(0);
  psrt::Shape shape = {-1};
  const auto& dims = in.type().tensor_type().shape().dim();
  for (int i = 1; i < dims.size() && i < 8; ++i) shape.push_back(dims[i].has_dim_value() ? dims[i].dim_value() : 1);
  for (int64_t d : shape) {
    if (d < -1 || d > (int64_t{1} << 20)) return 0;  // a feature the job file would not declare
  }
  // An integer input is fed ids (an id feature), looked up by its Gathers:
  // as tables by rows for an odd-sized file, dense for an even one.
  const int elem = in.type().tensor_type().elem_type();
  const psrt::DataType dtype =
      elem == psrt::onnx::TensorProto::INT64 || elem == psrt::onnx::TensorProto::INT32 ? psrt::DT_INT64 : psrt::DT_FLOAT;
  psrt::GraphDef graph;
  psrt::GraphBuilder b(&graph);
  b.Add("Placeholder", "image", {}, {{"shape", psrt::AttrShape(shape)}, {"dtype", psrt::AttrType(dtype)}});
  psrt::OnnxImportOptions options;
  options.inputs[in.name()] = {"image", shape, dtype};
  options.row_tables = size % 2 == 1;
  for (const auto& o : model.graph().output()) options.outputs.push_back(o.name());
  if (options.outputs.empty()) return 0;
  absl::StatusOr<psrt::OnnxImport> imported = psrt::ImportOnnx(model, options, &b);
  if (!imported.ok()) return 0;
  std::vector<std::string> variables;
  for (const psrt::VariableDef& v : imported->variables) variables.push_back(v.name());
  const std::string out = imported->outputs.at(options.outputs[0]);
  const std::string loss = b.Add("ReduceSum", "fuzz_loss", {out}, {{"axes", psrt::AttrInts({})}});
  absl::StatusOr<std::map<std::string, std::string>> grads = psrt::AddGradients(&graph, loss, variables);
  if (!grads.ok()) return 0;
  (void)psrt::Executor::Create(graph, psrt::ExecutorOptions{1});
  return 0;
}
