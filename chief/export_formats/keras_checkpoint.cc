#include "chief/export_formats/keras_checkpoint.h"

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "chief/export_formats/tf_bundle_writer.h"
#include "common/graph/model_compiler.h"
#include "common/json_string.h"
#include "common/status_macros.h"
#include "proto/tf_checkpoint.pb.h"

namespace psrt {
namespace {

using ObjectGraph = tfckpt::TrackableObjectGraph;

const char* ActivationName(Activation a) {
  switch (a) {
    case RELU: return "relu";
    case SIGMOID: return "sigmoid";
    case TANH: return "tanh";
    case SOFTMAX: return "softmax";
    default: return "linear";
  }
}

std::string Padding2(Padding p) { return p == SAME ? "\"same\"" : "\"valid\""; }
std::string Pair(int64_t v) { return absl::StrCat("[", v, ", ", v, "]"); }

// A layer's kernel_regularizer / bias_regularizer as Keras 3 serializes one
// (keras.regularizers.L1L2; "null" when there is none), so the loaded
// model trains on with the same loss.
std::string RegularizerConfig(bool has, const RegularizerDef& r) {
  if (!has || (r.l1() == 0 && r.l2() == 0)) return "null";
  return absl::StrFormat(
      "{\"module\": \"keras.regularizers\", \"class_name\": \"L1L2\", \"config\": {\"l1\": %.9g, \"l2\": "
      "%.9g}, \"registered_name\": null}",
      r.l1(), r.l2());
}

std::string Regularizers(const LayerDef& l) {
  return absl::StrCat(", \"kernel_regularizer\": ", RegularizerConfig(l.has_kernel_regularizer(), l.kernel_regularizer()),
                      ", \"bias_regularizer\": ", RegularizerConfig(l.has_bias_regularizer(), l.bias_regularizer()));
}

// Adds a node to `g` (has_checkpoint_values set: every node we write leads
// to a value) and returns its id.
int AddNode(ObjectGraph* g) {
  g->add_nodes()->mutable_has_checkpoint_values()->set_value(true);
  return g->nodes_size() - 1;
}

void AddChild(ObjectGraph* g, int parent, int child, const std::string& local_name) {
  auto* ref = g->mutable_nodes(parent)->add_children();
  ref->set_node_id(child);
  ref->set_local_name(local_name);
}

}  // namespace

std::string KerasCheckpointKey(int layer_index, const std::string& attribute) {
  return absl::StrCat("model/_functional/_operations/", layer_index + 1, "/", attribute,
                      "/.ATTRIBUTES/VARIABLE_VALUE");
}

absl::StatusOr<std::vector<KerasLayer>> KerasLayers(const TrainingJob& job) {
  if (job.model().kind_case() != ModelDef::kSequential) {
    return absl::InvalidArgumentError("only model.sequential jobs are exported");
  }
  std::vector<KerasLayer> out;
  const auto& layers = job.model().sequential().layer();
  for (int i = 0; i < layers.size(); ++i) {
    const LayerDef& l = layers[i];
    const std::string name = LayerName(l, i);
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("model.sequential.layer[", i, "] (", name, "): ", why));
    };
    if (l.kind_case() == LayerDef::kEmbedding || l.kind_case() == LayerDef::kEmbeddingBag) {
      return fail("sums or averages the embeddings of a variable-length id list per example, which no "
                  "built-in Keras layer computes; not exported (dense, conv2d, max_pool2d, flatten, dropout "
                  "and activation are)");
    }
    if (l.inputs_size() > 0) return fail("reads named inputs; a Keras Sequential model is a plain chain");
    if (absl::StrContains(name, '/')) return fail("has a '/' in its name, which Keras refuses in layer names");
    KerasLayer k;
    std::string config = absl::StrCat("\"name\": ", JsonString(name));
    switch (l.kind_case()) {
      case LayerDef::kDense:
        k.class_name = "Dense";
        k.saving_name = "dense";
        absl::StrAppend(&config, ", \"units\": ", l.dense().units(), ", \"activation\": \"",
                        ActivationName(l.dense().activation()), "\", \"use_bias\": ",
                        l.dense().no_bias() ? "false" : "true", Regularizers(l));
        k.variables.push_back({"_kernel", name + "/kernel"});
        if (!l.dense().no_bias()) k.variables.push_back({"bias", name + "/bias"});
        break;
      case LayerDef::kConv2D: {
        const Conv2DLayer& c = l.conv2d();
        k.class_name = "Conv2D";
        k.saving_name = "conv2d";
        absl::StrAppend(&config, ", \"filters\": ", c.filters(), ", \"kernel_size\": ", Pair(c.kernel_size()),
                        ", \"strides\": ", Pair(c.stride() > 0 ? c.stride() : 1), ", \"padding\": ",
                        Padding2(c.padding()), ", \"activation\": \"", ActivationName(c.activation()), "\"",
                        Regularizers(l));
        k.variables.push_back({"_kernel", name + "/kernel"});
        k.variables.push_back({"bias", name + "/bias"});
        break;
      }
      case LayerDef::kMaxPool2D: {
        const MaxPool2DLayer& p = l.max_pool2d();
        int64_t size = p.pool_size() > 0 ? p.pool_size() : 2;
        k.class_name = "MaxPooling2D";
        k.saving_name = "max_pooling2d";
        absl::StrAppend(&config, ", \"pool_size\": ", Pair(size), ", \"strides\": ",
                        Pair(p.stride() > 0 ? p.stride() : size), ", \"padding\": ", Padding2(p.padding()));
        break;
      }
      case LayerDef::kFlatten:
        k.class_name = "Flatten";
        k.saving_name = "flatten";
        break;
      case LayerDef::kDropout:
        k.class_name = "Dropout";
        k.saving_name = "dropout";
        absl::StrAppend(&config, ", \"rate\": ", l.dropout().rate());
        break;
      case LayerDef::kActivation:
        k.class_name = "Activation";
        k.saving_name = "activation";
        absl::StrAppend(&config, ", \"activation\": \"", ActivationName(l.activation().activation()), "\"");
        break;
      default:
        return fail("is not exported yet (dense, conv2d, max_pool2d, flatten, dropout and activation are)");
    }
    k.config_json = absl::StrCat("{", config, "}");
    out.push_back(std::move(k));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> KerasInputShape(const TrainingJob& job) {
  for (const FeatureDef& f : job.input().feature()) {
    if (f.kind() == FeatureDef::DENSE) return std::vector<int64_t>(f.shape().begin(), f.shape().end());
  }
  return absl::InvalidArgumentError("the job's input has no DENSE feature for a Keras model's input");
}

absl::Status WriteKerasCheckpoint(const TrainingJob& job, const std::map<std::string, Tensor>& values,
                                  const std::string& prefix) {
  ASSIGN_OR_RETURN(std::vector<KerasLayer> layers, KerasLayers(job));
  // root -> model -> _functional -> _operations -> "<k>" -> _kernel / bias,
  // the path a Keras 3 Sequential model's variables take.
  ObjectGraph graph;
  const int root = AddNode(&graph), model = AddNode(&graph), functional = AddNode(&graph),
            operations = AddNode(&graph);
  AddChild(&graph, root, model, "model");
  AddChild(&graph, model, functional, "_functional");
  AddChild(&graph, functional, operations, "_operations");
  // A Functional model (keras.Model(inputs, outputs)) holds the same
  // operations directly, model/_operations/<k>: the second path to the same
  // node lets either kind of model restore every value.
  AddChild(&graph, model, operations, "_operations");
  TfBundleWriter writer;
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) {
    if (layers[i].variables.empty()) continue;
    const int layer = AddNode(&graph);
    AddChild(&graph, operations, layer, absl::StrCat(i + 1));
    for (const auto& [attribute, variable] : layers[i].variables) {
      auto it = values.find(variable);
      if (it == values.end()) return absl::NotFoundError(absl::StrCat("no value for variable ", variable));
      const std::string key = KerasCheckpointKey(i, attribute);
      RETURN_IF_ERROR(writer.AddFloat(key, it->second));
      const int node = AddNode(&graph);
      AddChild(&graph, layer, node, attribute);
      auto* tensor = graph.mutable_nodes(node)->add_attributes();
      tensor->set_name("VARIABLE_VALUE");
      tensor->set_full_name(variable);
      tensor->set_checkpoint_key(key);
    }
  }
  RETURN_IF_ERROR(writer.AddString("_CHECKPOINTABLE_OBJECT_GRAPH", graph.SerializeAsString()));
  RETURN_IF_ERROR(writer.Finish(prefix));

  // The model's description, for rebuilding it in Keras.
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, KerasInputShape(job));
  std::vector<std::string> items;
  for (const KerasLayer& k : layers) {
    items.push_back(absl::StrCat("    {\"module\": \"keras.layers\", \"class_name\": \"", k.class_name,
                                 "\", \"config\": ", k.config_json, "}"));
  }
  const std::string json_path = prefix + ".keras.json";
  std::ofstream json(json_path, std::ios::trunc);
  json << "{\n  \"input_shape\": [" << absl::StrJoin(shape, ", ") << "],\n  \"layers\": [\n"
       << absl::StrJoin(items, ",\n") << "\n  ]\n}\n";
  json.close();
  if (!json) return absl::InternalError(absl::StrCat("cannot write ", json_path));
  return absl::OkStatus();
}

}  // namespace psrt
