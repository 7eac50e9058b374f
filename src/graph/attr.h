// Named, typed node attributes (strides, padding, rate, ...).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace sf {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                               std::vector<double>, Tensor>;

enum class AttrKind { Int, Float, Bool, String, Ints, Floats, Tensor };
const char* attr_kind_name(AttrKind kind);
AttrKind attr_kind_of(const AttrValue& value);
std::string attr_value_str(const AttrValue& value);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  const std::map<std::string, AttrValue>& all() const { return values_; }

  int64_t get_int(const std::string& name) const { return get<int64_t>(name); }
  double get_float(const std::string& name) const;  // accepts an Int as well
  bool get_bool(const std::string& name) const { return get<bool>(name); }
  const std::string& get_string(const std::string& name) const { return get<std::string>(name); }
  const std::vector<int64_t>& get_ints(const std::string& name) const {
    return get<std::vector<int64_t>>(name);
  }
  const std::vector<double>& get_floats(const std::string& name) const {
    return get<std::vector<double>>(name);
  }
  const Tensor& get_tensor(const std::string& name) const { return get<Tensor>(name); }

  template <typename T>
  const T& get(const std::string& name) const {
    auto it = values_.find(name);
    SF_CHECK(it != values_.end(), "attribute '{}' missing", name);
    const T* value = std::get_if<T>(&it->second);
    SF_CHECK(value != nullptr, "attribute '{}' has kind {}", name,
             attr_kind_name(attr_kind_of(it->second)));
    return *value;
  }

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace sf
