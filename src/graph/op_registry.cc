#include "graph/op_registry.h"

namespace sf {

void InferContext::expect_rank(int i, int rank, const char* what) const {
  if (static_cast<int>(shape(i).size()) != rank)
    fail("input '{}' must have rank {}, got {}", what, rank, shape_str(shape(i)));
}

void InferContext::expect_dtype(int i, DType dtype, const char* what) const {
  if (this->dtype(i) != dtype)
    fail("input '{}' must be {}, got {}", what, dtype_name(dtype), dtype_name(this->dtype(i)));
}

std::string GradContext::name(const std::string& suffix) const {
  return graph.unique_name(node.name + "/grad/" + suffix);
}

void OpRegistry::add(OpDef def) {
  SF_CHECK(find(def.name) == nullptr, "op '{}' declared twice", def.name);
  SF_CHECK(static_cast<bool>(def.infer), "op '{}' has no shape function", def.name);
  defs_.push_back(std::move(def));
}

const OpDef* OpRegistry::find(const std::string& name) const {
  for (const OpDef& d : defs_)
    if (d.name == name) return &d;
  return nullptr;
}

const OpDef& OpRegistry::get(const std::string& name, const std::string& where) const {
  const OpDef* def = find(name);
  if (def == nullptr) fail("{}: unknown op '{}'", where, name);
  return *def;
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const OpDef& d : defs_) out.push_back(d.name);
  return out;
}

}  // namespace sf
