#include "graph/graph.h"

#include <fmt/format.h>

#include "core/limits.h"
#include "graph/op_registry.h"

namespace sf {

std::string type_str(const TensorType& type) {
  return fmt::format("{}{}", dtype_name(type.dtype), shape_str(type.shape));
}

Activation activation_of(const Node& node) {
  if (!node.attrs.has("activation")) return Activation::None;
  const std::string& name = node.attrs.get_string("activation");
  const std::optional<Activation> activation = parse_activation(name);
  if (!activation)
    fail("node '{}' ({}): activation '{}' must be none, relu or relu6", node.name, node.op, name);
  return *activation;
}

namespace {

// Fills defaults and rejects unknown or mistyped attributes.
void check_attrs(const OpDef& def, Node& node) {
  for (const auto& [name, value] : node.attrs.all()) {
    const AttrSpec* spec = nullptr;
    for (const AttrSpec& s : def.attrs)
      if (s.name == name) spec = &s;
    if (spec == nullptr) {
      std::string known;
      for (const AttrSpec& s : def.attrs) known += (known.empty() ? "" : ", ") + s.name;
      fail("node '{}' ({}): unknown attribute '{}' (known: {})", node.name, node.op, name,
           known.empty() ? "none" : known);
    }
    AttrKind kind = attr_kind_of(value);
    bool int_as_float = spec->kind == AttrKind::Float && kind == AttrKind::Int;
    if (kind != spec->kind && !int_as_float)
      fail("node '{}' ({}): attribute '{}' must be {}, got {} {}", node.name, node.op, name,
           attr_kind_name(spec->kind), attr_kind_name(kind), attr_value_str(value));
  }
  for (const AttrSpec& s : def.attrs) {
    if (node.attrs.has(s.name)) continue;
    if (!s.default_value)
      fail("node '{}' ({}): missing required attribute '{}'", node.name, node.op, s.name);
    node.attrs.set(s.name, *s.default_value);
  }
}

}  // namespace

int Graph::add_node(const std::string& op, std::vector<Output> inputs, Attrs attrs,
                    const std::string& name) {
  Node node;
  node.id = num_nodes();
  node.name = name.empty() ? unique_name(op) : name;
  node.op = op;
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  if (by_name_.count(node.name)) fail("node '{}' ({}): name already used", node.name, op);
  const OpDef& def = OpRegistry::global().get(op, fmt::format("node '{}'", node.name));
  size_t expected = def.inputs.size();
  if (def.variadic ? node.inputs.empty() : node.inputs.size() != expected)
    fail("node '{}' ({}): expects {} input(s), got {}", node.name, op,
         def.variadic ? "one or more" : std::to_string(expected), node.inputs.size());
  for (const Output& in : node.inputs)
    if (in.node < 0 || in.node >= num_nodes() || in.index < 0 ||
        in.index >= static_cast<int>(nodes_[in.node].outputs.size()))
      fail("node '{}' ({}): input refers to a missing node output", node.name, op);
  check_attrs(def, node);
  node.outputs = infer(node);
  by_name_[node.name] = node.id;
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

std::vector<TensorType> Graph::infer(const Node& node) const {
  const OpDef& def = OpRegistry::global().get(node.op, fmt::format("node '{}'", node.name));
  std::vector<TensorType> input_types;
  for (const Output& in : node.inputs) input_types.push_back(type(in));
  InferContext ctx(node, input_types);
  std::vector<TensorType> outputs = def.infer(ctx);
  // Every path that builds a graph (.sfm, ONNX, specs, the C API) passes here, so no tensor
  // with a wrapped or absurd element count reaches planning or a kernel.
  for (size_t i = 0; i < outputs.size(); ++i)
    limits::checked_num_elements(outputs[i].shape,
                                 fmt::format("node '{}' ({}): output {}", node.name, node.op, i));
  return outputs;
}

const TensorType& Graph::type(Output output) const {
  const Node& n = node(output.node);
  SF_CHECK(output.index >= 0 && output.index < static_cast<int>(n.outputs.size()),
           "node '{}' has no output {}", n.name, output.index);
  return n.outputs[static_cast<size_t>(output.index)];
}

int Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

int Graph::id_of(const std::string& name) const {
  int id = find(name);
  if (id < 0) fail("no node named '{}' in the graph", name);
  return id;
}

std::string Graph::unique_name(const std::string& base) const {
  if (!by_name_.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string candidate = fmt::format("{}_{}", base, i);
    if (!by_name_.count(candidate)) return candidate;
  }
}

void Graph::reinfer(const std::map<int, Shape>& placeholder_shapes) {
  for (const auto& [id, shape] : placeholder_shapes) {
    Node& n = mutable_node(id);
    SF_CHECK(n.op == "Placeholder", "reinfer: node '{}' is a {}, not a Placeholder", n.name, n.op);
    n.attrs.set("shape", shape);
  }
  for (Node& n : nodes_) n.outputs = infer(n);
}

std::vector<bool> needed_nodes(const Graph& graph, const std::vector<Output>& outputs) {
  std::vector<bool> needed(static_cast<size_t>(graph.num_nodes()), false);
  for (const Output& o : outputs) needed[static_cast<size_t>(o.node)] = true;
  // Inputs come before their readers, so one backward sweep reaches every dependency.
  for (int id = graph.num_nodes() - 1; id >= 0; --id)
    if (needed[static_cast<size_t>(id)])
      for (const Output& in : graph.node(id).inputs) needed[static_cast<size_t>(in.node)] = true;
  return needed;
}

}  // namespace sf
