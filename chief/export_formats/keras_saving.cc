#include "chief/export_formats/keras_saving.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "chief/export_formats/h5_writer.h"
#include "chief/export_formats/keras_checkpoint.h"
#include "chief/export_formats/zip_writer.h"
#include "common/graph/model_compiler.h"
#include "common/json_string.h"
#include "common/status_macros.h"

namespace psrt {
namespace {

// The model's name: the job's, without the '/' Keras refuses in names.
std::string ModelName(const TrainingJob& job) {
  return job.name().empty() ? "sequential" : absl::StrReplaceAll(job.name(), {{"/", "_"}});
}

// What the layer's config makes of the variable's shape: -1 is any size.
std::vector<int64_t> ExpectedShape(const LayerDef& l, const std::string& attribute) {
  const bool kernel = attribute == "_kernel";
  switch (l.kind_case()) {
    case LayerDef::kDense:
      if (kernel) return {-1, l.dense().units()};
      return {l.dense().units()};
    case LayerDef::kConv2D: {
      const Conv2DLayer& c = l.conv2d();
      if (kernel) return {c.kernel_size(), c.kernel_size(), -1, c.filters()};
      return {c.filters()};
    }
    default:
      return {};
  }
}

absl::Status CheckVariable(const LayerDef& l, const std::string& layer, const std::string& attribute,
                           const std::string& variable, const Tensor& t) {
  const std::vector<int64_t> want = ExpectedShape(l, attribute);
  bool ok = t.dtype() == DT_FLOAT && t.shape().rank() == static_cast<int>(want.size());
  for (size_t d = 0; ok && d < want.size(); ++d) ok = want[d] < 0 || want[d] == t.shape().dim(static_cast<int>(d));
  if (ok) return absl::OkStatus();
  std::vector<std::string> dims;
  for (int64_t d : want) dims.push_back(d < 0 ? "?" : absl::StrCat(d));
  return absl::FailedPreconditionError(
      absl::StrCat("variable ", variable, " is ", DataTypeName(t.dtype()), " ", t.shape().ToString(), "; layer ", layer,
                   " needs float32 [", absl::StrJoin(dims, ","), "] (is the job the one that wrote the checkpoint?)"));
}

absl::StatusOr<std::string> WeightsH5(const TrainingJob& job, const std::map<std::string, Tensor>& values,
                                      const KerasOptimizerState* optimizer) {
  ASSIGN_OR_RETURN(std::vector<KerasLayer> layers, KerasLayers(job));
  const auto& defs = job.model().sequential().layer();
  ASSIGN_OR_RETURN(std::unique_ptr<H5Writer> h5, H5Writer::Create());
  RETURN_IF_ERROR(h5->AddGroup("vars", {{"name", ModelName(job)}}));
  RETURN_IF_ERROR(h5->AddGroup("layers"));
  std::map<std::string, int> used;  // saving name -> layers of it so far
  std::set<std::string> written;
  for (size_t i = 0; i < layers.size(); ++i) {
    const KerasLayer& k = layers[i];
    const std::string name = LayerName(defs[static_cast<int>(i)], static_cast<int>(i));
    const int n = used[k.saving_name]++;
    const std::string group = absl::StrCat("layers/", k.saving_name, n == 0 ? "" : absl::StrCat("_", n), "/vars");
    RETURN_IF_ERROR(h5->AddGroup(group, {{"name", name}}));
    for (size_t v = 0; v < k.variables.size(); ++v) {
      const auto& [attribute, variable] = k.variables[v];
      auto it = values.find(variable);
      if (it == values.end()) {
        return absl::NotFoundError(absl::StrCat("the checkpoint has no variable ", variable, " (layer ", name, ")"));
      }
      RETURN_IF_ERROR(CheckVariable(defs[static_cast<int>(i)], name, attribute, variable, it->second));
      RETURN_IF_ERROR(h5->AddFloatDataset(absl::StrCat(group, "/", v), it->second));
      written.insert(variable);
    }
  }
  for (const auto& [variable, value] : values) {
    if (written.count(variable) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("the checkpoint holds variable ", variable,
                                                        ", which no layer of the job's model has "
                                                        "(is the job the one that wrote the checkpoint?)"));
    }
  }
  if (optimizer != nullptr) {
    RETURN_IF_ERROR(h5->AddGroup("optimizer/vars", {{"name", optimizer->name}}));
    for (size_t i = 0; i < optimizer->variables.size(); ++i) {
      const Tensor& t = optimizer->variables[i];
      const std::string path = absl::StrCat("optimizer/vars/", i);
      RETURN_IF_ERROR(t.dtype() == DT_INT64 ? h5->AddInt64Dataset(path, t) : h5->AddFloatDataset(path, t));
    }
  }
  return h5->Finish();
}

}  // namespace

absl::StatusOr<std::string> KerasWeightsH5(const TrainingJob& job, const std::map<std::string, Tensor>& values) {
  return WeightsH5(job, values, /*optimizer=*/nullptr);
}

absl::StatusOr<std::string> KerasModelConfig(const TrainingJob& job, const std::string& compile_config_json) {
  ASSIGN_OR_RETURN(std::vector<KerasLayer> layers, KerasLayers(job));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, KerasInputShape(job));
  std::string input_name = "input_layer";
  for (const FeatureDef& f : job.input().feature()) {
    if (f.kind() == FeatureDef::DENSE) {
      input_name = absl::StrReplaceAll(f.name(), {{"/", "_"}});
      break;
    }
  }
  std::vector<std::string> items = {
      absl::StrCat("{\"module\": \"keras.layers\", \"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null",
                   shape.empty() ? "" : ", ", absl::StrJoin(shape, ", "),
                   "], \"dtype\": \"float32\", \"name\": ", JsonString(input_name), "}, \"registered_name\": null}")};
  for (const KerasLayer& k : layers) {
    items.push_back(absl::StrCat("{\"module\": \"keras.layers\", \"class_name\": \"", k.class_name,
                                 "\", \"config\": ", k.config_json, ", \"registered_name\": null}"));
  }
  return absl::StrCat(
      "{\"module\": \"keras\", \"class_name\": \"Sequential\", \"config\": {\"name\": ", JsonString(ModelName(job)),
      ", \"trainable\": true, \"layers\": [\n  ", absl::StrJoin(items, ",\n  "), "\n]}, \"registered_name\": null",
      compile_config_json.empty() ? "" : absl::StrCat(",\n\"compile_config\": ", compile_config_json), "}\n");
}

absl::StatusOr<std::string> KerasArchive(const TrainingJob& job, const std::map<std::string, Tensor>& values,
                                         const KerasOptimizerState* optimizer) {
  ASSIGN_OR_RETURN(std::string config,
                   KerasModelConfig(job, optimizer == nullptr ? "" : optimizer->compile_config_json));
  ASSIGN_OR_RETURN(std::string weights, WeightsH5(job, values, optimizer));
  // Keras reads neither field back; keras_version names the saving format
  // followed (Keras 3's, the same from 3.0 to 3.15 for these layers).
  const std::string metadata = absl::StrCat("{\"keras_version\": \"3.0.0\", \"date_saved\": \"",
                                            absl::FormatTime("%Y-%m-%d@%H:%M:%S", absl::Now(), absl::UTCTimeZone()),
                                            "\", \"producer\": \"psrt export\"}");
  return StoredZip({{"metadata.json", metadata}, {"config.json", config}, {"model.weights.h5", weights}});
}

}  // namespace psrt
