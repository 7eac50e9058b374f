#include "graph/attr.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sf {

const char* attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::Bool: return "bool";
    case AttrKind::String: return "string";
    case AttrKind::Ints: return "ints";
    case AttrKind::Floats: return "floats";
    case AttrKind::Tensor: return "tensor";
  }
  return "?";
}

AttrKind attr_kind_of(const AttrValue& value) { return static_cast<AttrKind>(value.index()); }

std::string attr_value_str(const AttrValue& value) {
  struct Printer {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return "'" + v + "'"; }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const std::vector<double>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const Tensor& t) const {
      return fmt::format("tensor {}{}", dtype_name(t.dtype()), shape_str(t.shape()));
    }
  };
  return std::visit(Printer{}, value);
}

double Attrs::get_float(const std::string& name) const {
  auto it = values_.find(name);
  SF_CHECK(it != values_.end(), "attribute '{}' missing", name);
  if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return get<double>(name);
}

}  // namespace sf
