// The inference graph of a job's model as an ONNX model (opset 13) with the
// trained weights as initializers, for ONNX Runtime and other runtimes.
//
// The graph is the compiled model pruned to its output (loss, labels,
// metrics and gradients dropped), with dropout removed (the identity at
// inference). Its one input is the job's dense feature ("image",
// [batch, ...] float, batch symbolic); its one output, "output", is what the
// last layer computes, its activation included (psrt folds a final softmax
// into the loss while training; here it is applied, as Keras would).
//
// psrt computes images NHWC and ONNX's Conv and MaxPool take NCHW: each
// is wrapped in a pair of Transposes (NHWC -> NCHW -> NHWC), so every other
// op, Flatten's reshape included, sees psrt's layout and the weights of the
// dense layers stay as trained. Conv kernels are stored in ONNX's
// [filters, in, kh, kw] layout (psrt and Keras hold [kh, kw, in, filters]).
//
// A model imported from ONNX (model.onnx) is written back as its own file:
// the same graph, inputs and outputs, the trained values in its
// initializers, Dropout turned off.
#ifndef PSRT_CHIEF_EXPORT_FORMATS_ONNX_EXPORT_H_
#define PSRT_CHIEF_EXPORT_FORMATS_ONNX_EXPORT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/graph/model_compiler.h"
#include "common/tensor.h"
#include "proto/job.pb.h"
#include "proto/onnx_subset.pb.h"

namespace psrt {

// `model` is CompileModel(job); `values` holds every variable whole.
// INVALID_ARGUMENT naming the node (its layer) for an op ONNX export does
// not cover yet (embedding lookups, concatenation of several inputs).
absl::StatusOr<onnx::ModelProto> ExportOnnx(const TrainingJob& job, const CompiledModel& model,
                                            const std::map<std::string, Tensor>& values);

}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_ONNX_EXPORT_H_
