// The values of a graph's Variable nodes, by node name. Shared between sessions, optimizers,
// checkpoints and the freeze pass, so it lives with the graph rather than with any of them.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "core/tensor.h"

namespace sf {

class VariableStore {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // Throw "variable 'x' has no value ..." for a name that was never set.
  Tensor& get(const std::string& name);
  const Tensor& get(const std::string& name) const;
  void set(const std::string& name, Tensor value) { values_[name] = std::move(value); }
  const std::map<std::string, Tensor>& all() const { return values_; }

 private:
  std::map<std::string, Tensor> values_;
};

}  // namespace sf
