// A psrt checkpoint as a TensorFlow checkpoint that a Keras 3 model (the
// Keras of TensorFlow 2.21) built from the same layer list restores:
//
//   model = keras.Sequential([keras.Input(shape), <the job's layers in order>])
//   tf.train.Checkpoint(model=model).read(PREFIX).assert_consumed()
//
// or a Functional model of the same layers (keras.Model(inputs, outputs)),
// whose operations sit at model/_operations instead of
// model/_functional/_operations: the object graph holds both paths to the
// same nodes. Restore before compile(): a compiled model's optimizer is no
// object of the checkpoint, and assert_consumed() says so.
//
// Keras 3 no longer loads TensorFlow-format checkpoints with
// model.load_weights (it takes .weights.h5 and .keras files only), but its
// layers are still trackable, so tf.train.Checkpoint matches them through
// the object graph. The keys are what such a model saves itself:
//   model/_functional/_operations/<k>/_kernel/.ATTRIBUTES/VARIABLE_VALUE
//   model/_functional/_operations/<k>/bias/.ATTRIBUTES/VARIABLE_VALUE
// with k = the layer's index in the job + 1 (operation 0 is the Input),
// plus _CHECKPOINTABLE_OBJECT_GRAPH, the serialized graph of those objects.
// Kernels keep psrt's layouts, which are Keras' ([in, units] for Dense,
// [kh, kw, in, filters] for Conv2D).
//
// Beside it, PREFIX.keras.json describes the model (input shape and each
// layer's Keras class and config), so the Keras model can be rebuilt with
// keras.layers.deserialize without reading the job file.
#ifndef PSRT_CHIEF_EXPORT_FORMATS_KERAS_CHECKPOINT_H_
#define PSRT_CHIEF_EXPORT_FORMATS_KERAS_CHECKPOINT_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

// The Keras counterpart of one layer of the job.
struct KerasLayer {
  std::string class_name;   // "Dense"
  // Keras' saving_lib files a layer of a model under its class name in
  // snake case ("max_pooling2d"; a second one of the class "_1", ...).
  std::string saving_name;
  std::string config_json;  // {"name": "dense_1", "units": 128, ...}
  // (Keras attribute, psrt variable): ("_kernel", "dense_1/kernel").
  std::vector<std::pair<std::string, std::string>> variables;
};

// The job's sequential model as Keras layers, in order. INVALID_ARGUMENT
// naming the layer (index and name) for one Keras' Sequential cannot hold:
// a layer that reads named inputs, a name with '/', or an embedding (psrt's
// embeddings sum or average variable-length id lists, which no built-in
// Keras layer does).
absl::StatusOr<std::vector<KerasLayer>> KerasLayers(const TrainingJob& job);

// The per-example shape of the job's first DENSE input feature, which the
// first layer reads ([28, 28, 1]). INVALID_ARGUMENT if it has none.
absl::StatusOr<std::vector<int64_t>> KerasInputShape(const TrainingJob& job);

// The key under which Keras saves attribute `attribute` of the layer at
// `layer_index` of the job.
std::string KerasCheckpointKey(int layer_index, const std::string& attribute);

// Writes PREFIX.index, PREFIX.data-00000-of-00001 and PREFIX.keras.json
// from `values` (every variable of the job's model, whole). Errors name
// the layer or variable at fault, or the file that could not be written.
absl::Status WriteKerasCheckpoint(const TrainingJob& job, const std::map<std::string, Tensor>& values,
                                  const std::string& prefix);

}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_KERAS_CHECKPOINT_H_
