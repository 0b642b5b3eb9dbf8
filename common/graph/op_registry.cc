#include "common/graph/op_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace psrt {

std::string ShapeString(const Shape& s) {
  std::vector<std::string> d;
  for (int64_t x : s) d.push_back(x < 0 ? "?" : absl::StrCat(x));
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

const OpRegistry& OpRegistry::Global() {
  static const OpRegistry* r = [] {
    auto* reg = new OpRegistry();
    RegisterBasicOps(reg);
    RegisterNnOps(reg);
    RegisterMathOps(reg);
    RegisterSequenceOps(reg);
    return reg;
  }();
  return *r;
}

const OpDef* OpRegistry::Find(const std::string& op) const {
  auto it = ops_.find(op);
  return it == ops_.end() ? nullptr : &it->second;
}

void OpRegistry::Register(OpDef def) { ops_[def.name] = std::move(def); }

std::vector<std::string> OpRegistry::Names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : ops_) out.push_back(k);
  return out;
}

}  // namespace psrt
