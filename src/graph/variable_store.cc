#include "graph/variable_store.h"

#include "core/error.h"

namespace sf {

Tensor& VariableStore::get(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) fail("variable '{}' has no value (not initialized or restored)", name);
  return it->second;
}

const Tensor& VariableStore::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) fail("variable '{}' has no value (not initialized or restored)", name);
  return it->second;
}

}  // namespace sf
