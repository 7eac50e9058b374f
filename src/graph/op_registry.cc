#include "graph/op_registry.h"

#include <string_view>

namespace sf {

void InferContext::expect_rank(int i, int rank, const char* what) const {
  if (static_cast<int>(shape(i).size()) != rank)
    fail("input '{}' must have rank {}, got {}", what, rank, shape_str(shape(i)));
}

void InferContext::expect_dtype(int i, DType dtype, const char* what) const {
  if (this->dtype(i) != dtype)
    fail("input '{}' must be {}, got {}", what, dtype_name(dtype), dtype_name(this->dtype(i)));
}

int WeightInput::channel_axis_for(const Attrs& attrs, int rank) const {
  const int axis = channel_axis < 0 ? rank + channel_axis : channel_axis;
  if (transposed_by.empty() || !attrs.get_bool(transposed_by) || rank < 2) return axis;
  if (axis == rank - 1) return rank - 2;
  if (axis == rank - 2) return rank - 1;
  return axis;
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

std::vector<WeightUse> weight_uses(const Graph& graph) {
  std::vector<WeightUse> uses;
  for (const Node& node : graph.nodes()) {
    const OpDef& def = OpRegistry::global().get(node.op, fmt::format("node '{}'", node.name));
    for (const WeightInput& w : def.weights) {
      const Output weight = node.inputs.at(static_cast<size_t>(w.input));
      const int rank = static_cast<int>(graph.type(weight).shape.size());
      uses.push_back({node.id, weight, w.channel_axis_for(node.attrs, rank)});
    }
  }
  return uses;
}

bool is_quantization_input(const OpDef& def, int index) {
  if (index < 0) return false;
  const size_t i = def.variadic ? 0 : static_cast<size_t>(index);
  if (i >= def.inputs.size()) return false;
  const std::string_view name = def.inputs[i];
  for (const std::string_view kind : {"params", "scale", "scales", "zero_point", "range"})
    if (name == kind || (name.size() > kind.size() && name.ends_with(kind) &&
                         name[name.size() - kind.size() - 1] == '_'))
      return true;
  return false;
}

double node_flops(const Graph& graph, int id) {
  const Node& node = graph.node(id);
  std::vector<Shape> input_shapes;
  for (const Output& input : node.inputs) input_shapes.push_back(graph.type(input).shape);
  return node_flops(node, input_shapes);
}

double node_flops(const Node& node, const std::vector<Shape>& input_shapes) {
  const OpDef& def = OpRegistry::global().get(node.op, fmt::format("node '{}'", node.name));
  return def.flops ? def.flops(node, input_shapes) : 0.0;
}

}  // namespace sf
