// The op registry: for each op, how many outputs it has, its shape
// inference and its gradient function (the way tf.gradients builds
// gradients: each op adds the nodes that compute its inputs' gradients from
// its outputs' gradients).
//
// Shapes are dim vectors with -1 for a dimension unknown until run time
// (the batch). The registry is immutable after it is built, on first use.
#ifndef PSRT_COMMON_GRAPH_OP_REGISTRY_H_
#define PSRT_COMMON_GRAPH_OP_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/graph/graph_builder.h"
#include "proto/graph.pb.h"

namespace psrt {

using Shape = std::vector<int64_t>;

std::string ShapeString(const Shape& s);  // "[?,784]"

// What a gradient function sees: the forward node, the gradient flowing
// into each of its outputs ("" where none flows), and a builder to add the
// gradient nodes with.
struct GradContext {
  const NodeDef* node;
  std::vector<std::string> dy;
  GraphBuilder* builder;

  std::string in(int i) const { return node->input(i); }
  std::string out(int k) const { return TensorName(node->name(), k); }
  // Adds a gradient node named after the forward one.
  std::string Add(const std::string& op, const std::string& suffix,
                  const std::vector<std::string>& inputs, const Attrs& attrs = {}) const {
    return builder->Add(op, "gradients/" + node->name() + "/" + suffix, inputs, attrs);
  }
};

struct OpDef {
  std::string name;
  // -1: as many inputs as given (AddN, ConcatV2).
  int num_inputs = 1;
  int num_outputs = 1;
  std::function<absl::Status(const NodeDef&, const std::vector<Shape>& inputs,
                             std::vector<Shape>* outputs)>
      shape;
  // The gradient of each input ("" for none); null: not differentiable.
  std::function<absl::StatusOr<std::vector<std::string>>(const GradContext&)> grad;
};

class OpRegistry {
 public:
  // The ops of this runtime.
  static const OpRegistry& Global();

  const OpDef* Find(const std::string& op) const;
  void Register(OpDef def);
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, OpDef> ops_;
};

// Registration of each family, called by Global().
void RegisterBasicOps(OpRegistry* r);
void RegisterNnOps(OpRegistry* r);
void RegisterMathOps(OpRegistry* r);
void RegisterSequenceOps(OpRegistry* r);

}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_OP_REGISTRY_H_
