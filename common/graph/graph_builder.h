// Building GraphDefs in C++, and reading node attributes.
//
//   GraphDef g;
//   GraphBuilder b(&g);
//   std::string x = b.Add("Placeholder", "image", {}, {{"dtype", AttrType(DT_FLOAT)},
//                                                        {"shape", AttrShape({-1, 784})}});
//   std::string w = b.Add("Variable", "dense/kernel", {}, {...});
//   std::string y = b.Add("MatMul", "dense/matmul", {x, w});
//
// Tensor names are "node" (output 0) or "node:k". Names are made unique by
// a numeric suffix. Not thread-safe.
#ifndef PSRT_COMMON_GRAPH_GRAPH_BUILDER_H_
#define PSRT_COMMON_GRAPH_GRAPH_BUILDER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "proto/graph.pb.h"

namespace psrt {

using Attrs = std::map<std::string, AttrValue>;

AttrValue AttrI(int64_t v);
AttrValue AttrF(float v);
AttrValue AttrS(const std::string& v);
AttrValue AttrB(bool v);
AttrValue AttrType(DataType v);
AttrValue AttrShape(const std::vector<int64_t>& dims);  // -1 = unknown
AttrValue AttrInts(const std::vector<int64_t>& v);
AttrValue AttrTensor(const Tensor& t);

int64_t GetAttrI(const NodeDef& n, const std::string& name, int64_t fallback = 0);
float GetAttrF(const NodeDef& n, const std::string& name, float fallback = 0);
std::string GetAttrS(const NodeDef& n, const std::string& name, const std::string& fallback = "");
bool GetAttrB(const NodeDef& n, const std::string& name, bool fallback = false);
std::vector<int64_t> GetAttrShape(const NodeDef& n, const std::string& name);
std::vector<int64_t> GetAttrInts(const NodeDef& n, const std::string& name);

// "node:k" -> ("node", k); "node" -> ("node", 0); "^node" -> ("node", -1).
std::pair<std::string, int> ParseTensorName(absl::string_view name);
std::string TensorName(const std::string& node, int output);

class GraphBuilder {
 public:
  // Appends to `graph` (not owned); names already in it are taken.
  explicit GraphBuilder(GraphDef* graph);

  // Adds a node; returns the name of its output 0.
  std::string Add(const std::string& op, const std::string& name_hint,
                  const std::vector<std::string>& inputs, const Attrs& attrs = {});
  std::string UniqueName(const std::string& hint);
  GraphDef* graph() { return graph_; }

 private:
  GraphDef* const graph_;
  std::set<std::string> names_;
};

}  // namespace psrt

#endif  // PSRT_COMMON_GRAPH_GRAPH_BUILDER_H_
