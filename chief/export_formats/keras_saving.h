// A psrt checkpoint in the files Keras 3's own saving library writes and
// reads (keras/src/saving/saving_lib.py, checked against Keras 3.15):
//
// .weights.h5, what model.save_weights writes and model.load_weights(path)
// takes, for a Keras model built from the job's layer list, Sequential or
// Functional alike (saving_lib files weights by layer class, not by model
// kind):
//   /vars                      group, attribute name = the model's name
//   /layers/<saving name>/vars group, attribute name = the layer's name
//   /layers/<saving name>/vars/<i>  float32 dataset, the layer's i-th
//                              variable (Dense, Conv2D: 0 kernel, 1 bias)
// <saving name> is the layer's class in snake case, "_1", "_2", ... for
// the second and later layers of one class ("dense", "dense_1").
//
// .keras, what model.save writes and keras.models.load_model opens with no
// code of the user's: a zip of config.json (a keras.Sequential of an
// InputLayer and the job's layers, by their Keras class and config),
// metadata.json and model.weights.h5 (the file above). With the optimizer
// (KerasOptimizer, keras_optimizer.h), config.json also has the model's
// "compile_config" (optimizer, loss, metrics: load_model compiles it) and
// model.weights.h5 the group optimizer/vars (attribute name = the
// optimizer's), datasets 0..n-1 as the optimizer's save_own_variables
// writes them, so training goes on where the checkpoint left off.
//
// Kernels keep psrt's layouts, which are Keras' ([in, units] for Dense,
// [kh, kw, in, filters] for Conv2D).
#ifndef PSRT_CHIEF_EXPORT_FORMATS_KERAS_SAVING_H_
#define PSRT_CHIEF_EXPORT_FORMATS_KERAS_SAVING_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "chief/export_formats/keras_optimizer.h"
#include "common/tensor.h"
#include "proto/job.pb.h"

namespace psrt {

// The bytes of a .weights.h5 file of `values`, which must hold every
// variable of the job's model and nothing else. INVALID_ARGUMENT naming the
// layer for one Keras cannot hold (KerasLayers); NOT_FOUND naming the
// variable a layer needs and `values` lacks; FAILED_PRECONDITION naming
// the variable whose dtype or shape is not what its layer's config makes,
// or a value no layer of the job has (a checkpoint of another model).
absl::StatusOr<std::string> KerasWeightsH5(const TrainingJob& job, const std::map<std::string, Tensor>& values);

// config.json of a .keras file: the job's model as a keras.Sequential
// (input: the first DENSE feature), with `compile_config_json` as its
// "compile_config" unless empty. Errors as KerasLayers.
absl::StatusOr<std::string> KerasModelConfig(const TrainingJob& job, const std::string& compile_config_json = "");

// The bytes of a .keras file: config.json, metadata.json, model.weights.h5,
// with `optimizer`'s state when not null (not owned). Errors as
// KerasWeightsH5.
absl::StatusOr<std::string> KerasArchive(const TrainingJob& job, const std::map<std::string, Tensor>& values,
                                         const KerasOptimizerState* optimizer = nullptr);

}  // namespace psrt

#endif  // PSRT_CHIEF_EXPORT_FORMATS_KERAS_SAVING_H_
