#include "transforms/graph_uses.h"

#include <numeric>

#include "ops/op_names.h"

namespace sf {

GraphUses::GraphUses(const Graph& graph, const std::vector<Output>& outputs,
                     const std::vector<int>& kept)
    : graph_(graph), outputs_(outputs), uses_(static_cast<size_t>(graph.num_nodes()), 0) {
  std::vector<Output> roots = outputs;
  for (int id : kept) roots.push_back({id, 0});
  needed_ = needed_nodes(graph, roots);
  for (const Output& o : outputs) {
    ++uses_[static_cast<size_t>(o.node)];
    ++output_uses_[o];
  }
  for (int id = 0; id < graph.num_nodes(); ++id)
    if (needed(id))
      for (int i = 0; i < static_cast<int>(graph.node(id).inputs.size()); ++i) {
        const Output& in = graph.node(id).inputs[static_cast<size_t>(i)];
        ++uses_[static_cast<size_t>(in.node)];
        ++output_uses_[in];
        readers_[in.node].push_back({id, i});
      }
}

GraphUses GraphUses::of_all_nodes(const Graph& graph) {
  std::vector<int> all(static_cast<size_t>(graph.num_nodes()));
  std::iota(all.begin(), all.end(), 0);
  return GraphUses(graph, {}, all);
}

bool GraphUses::is_graph_output(int id) const {
  for (const Output& o : outputs_)
    if (o.node == id) return true;
  return false;
}

const std::vector<std::pair<int, int>>& GraphUses::readers(int id) const {
  static const std::vector<std::pair<int, int>> none;
  auto it = readers_.find(id);
  return it == readers_.end() ? none : it->second;
}

bool GraphUses::side_outputs_used(const Node& node) const {
  for (int i = 1; i < static_cast<int>(node.outputs.size()); ++i)
    if (is_read({node.id, i})) return true;
  return false;
}

const Node* GraphUses::sole_consumer(int id) const {
  if (uses(id) != 1 || is_graph_output(id)) return nullptr;
  const auto& [reader, input] = readers(id).front();
  const Node& node = graph_.node(reader);
  return node.inputs[static_cast<size_t>(input)].index == 0 ? &node : nullptr;
}

const Tensor* const_value(const Graph& graph, Output o) {
  const Node& n = graph.node(o.node);
  return n.op == op_names::kConst && o.index == 0 ? &n.attrs.get_tensor("value") : nullptr;
}

const Node* fusable_activation(const GraphUses& uses, int id) {
  const Node* act = uses.sole_consumer(id);
  return act && (act->op == op_names::kRelu || act->op == op_names::kRelu6) ? act : nullptr;
}

Activation fused_activation(const Node* relu) {
  if (relu == nullptr) return Activation::None;
  return relu->op == op_names::kRelu ? Activation::Relu : Activation::Relu6;
}

}  // namespace sf
