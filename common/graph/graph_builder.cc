#include "common/graph/graph_builder.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace psrt {

AttrValue AttrI(int64_t v) {
  AttrValue a;
  a.set_i(v);
  return a;
}
AttrValue AttrF(float v) {
  AttrValue a;
  a.set_f(v);
  return a;
}
AttrValue AttrS(const std::string& v) {
  AttrValue a;
  a.set_s(v);
  return a;
}
AttrValue AttrB(bool v) {
  AttrValue a;
  a.set_b(v);
  return a;
}
AttrValue AttrType(DataType v) {
  AttrValue a;
  a.set_type(v);
  return a;
}
AttrValue AttrShape(const std::vector<int64_t>& dims) {
  AttrValue a;
  auto* s = a.mutable_shape();
  for (int64_t d : dims) s->add_dim(d);
  return a;
}
AttrValue AttrInts(const std::vector<int64_t>& v) {
  AttrValue a;
  auto* l = a.mutable_list();
  for (int64_t x : v) l->add_i(x);
  return a;
}
AttrValue AttrTensor(const Tensor& t) {
  AttrValue a;
  t.ToProto(a.mutable_tensor());
  return a;
}

namespace {
const AttrValue* Find(const NodeDef& n, const std::string& name) {
  auto it = n.attr().find(name);
  return it == n.attr().end() ? nullptr : &it->second;
}
}  // namespace

int64_t GetAttrI(const NodeDef& n, const std::string& name, int64_t fallback) {
  const AttrValue* a = Find(n, name);
  return a && a->value_case() == AttrValue::kI ? a->i() : fallback;
}
float GetAttrF(const NodeDef& n, const std::string& name, float fallback) {
  const AttrValue* a = Find(n, name);
  return a && a->value_case() == AttrValue::kF ? a->f() : fallback;
}
std::string GetAttrS(const NodeDef& n, const std::string& name, const std::string& fallback) {
  const AttrValue* a = Find(n, name);
  return a && a->value_case() == AttrValue::kS ? a->s() : fallback;
}
bool GetAttrB(const NodeDef& n, const std::string& name, bool fallback) {
  const AttrValue* a = Find(n, name);
  return a && a->value_case() == AttrValue::kB ? a->b() : fallback;
}
std::vector<int64_t> GetAttrShape(const NodeDef& n, const std::string& name) {
  const AttrValue* a = Find(n, name);
  if (!a || a->value_case() != AttrValue::kShape) return {};
  return {a->shape().dim().begin(), a->shape().dim().end()};
}
std::vector<int64_t> GetAttrInts(const NodeDef& n, const std::string& name) {
  const AttrValue* a = Find(n, name);
  if (!a || a->value_case() != AttrValue::kList) return {};
  return {a->list().i().begin(), a->list().i().end()};
}

std::pair<std::string, int> ParseTensorName(absl::string_view name) {
  if (!name.empty() && name[0] == '^') return {std::string(name.substr(1)), -1};
  size_t colon = name.rfind(':');
  int k;
  if (colon != absl::string_view::npos && absl::SimpleAtoi(name.substr(colon + 1), &k)) {
    return {std::string(name.substr(0, colon)), k};
  }
  return {std::string(name), 0};
}

std::string TensorName(const std::string& node, int output) {
  return output == 0 ? node : absl::StrCat(node, ":", output);
}

GraphBuilder::GraphBuilder(GraphDef* graph) : graph_(graph) {
  for (const NodeDef& n : graph_->node()) names_.insert(n.name());
}

std::string GraphBuilder::UniqueName(const std::string& hint) {
  std::string name = hint;
  for (int i = 1; names_.count(name); ++i) name = absl::StrCat(hint, "_", i);
  names_.insert(name);
  return name;
}

std::string GraphBuilder::Add(const std::string& op, const std::string& name_hint,
                              const std::vector<std::string>& inputs, const Attrs& attrs) {
  NodeDef* n = graph_->add_node();
  n->set_name(UniqueName(name_hint));
  n->set_op(op);
  for (const auto& in : inputs) n->add_input(in);
  for (const auto& [k, v] : attrs) (*n->mutable_attr())[k] = v;
  return n->name();
}

}  // namespace psrt
