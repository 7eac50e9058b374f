// The rewriting engine of the graph passes: copies nodes from a source graph into a new one,
// remapping inputs, while a pass decides per node whether to copy it, drop it (forwarding an
// input) or replace a group of nodes.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "graph/graph.h"

namespace sf {

class Rewriter {
 public:
  explicit Rewriter(const Graph& source, const std::vector<Output>& outputs)
      : source_(source),
        outputs_(outputs),
        needed_(static_cast<size_t>(source.num_nodes()), false),
        uses_(static_cast<size_t>(source.num_nodes()), 0) {
    for (const Output& o : outputs) ++output_uses_[o];
    for (const Output& o : outputs) needed_[static_cast<size_t>(o.node)] = true;
    for (int id = source.num_nodes() - 1; id >= 0; --id)
      if (needed_[static_cast<size_t>(id)])
        for (const Output& in : source.node(id).inputs)
          needed_[static_cast<size_t>(in.node)] = true;
    for (int id = 0; id < source.num_nodes(); ++id)
      if (needed_[static_cast<size_t>(id)])
        for (int i = 0; i < static_cast<int>(source.node(id).inputs.size()); ++i) {
          const Output& in = source.node(id).inputs[static_cast<size_t>(i)];
          ++uses_[static_cast<size_t>(in.node)];
          ++output_uses_[in];
          readers_[in.node].push_back({id, i});
        }
    for (const Output& o : outputs) ++uses_[static_cast<size_t>(o.node)];
  }

  bool needed(int id) const { return needed_[static_cast<size_t>(id)]; }
  // How many inputs (and graph outputs) read any output of this node.
  int uses(int id) const { return uses_[static_cast<size_t>(id)]; }
  bool is_graph_output(int id) const {
    for (const Output& o : outputs_)
      if (o.node == id) return true;
    return false;
  }
  // Every needed (node, input index) reading any output of node `id`.
  const std::vector<std::pair<int, int>>& readers(int id) const {
    static const std::vector<std::pair<int, int>> none;
    auto it = readers_.find(id);
    return it == readers_.end() ? none : it->second;
  }
  // Whether anything reads outputs other than output 0 of this node.
  bool side_outputs_used(const Node& node) const {
    for (int i = 1; i < static_cast<int>(node.outputs.size()); ++i)
      if (output_uses_.count({node.id, i})) return true;
    return false;
  }
  Graph& target() { return target_; }
  Output map(Output old) const {
    auto it = map_.find(old);
    SF_CHECK(it != map_.end(), "rewrite: node '{}' output {} was not mapped",
             source_.node(old.node).name, old.index);
    return it->second;
  }
  void set(Output old, Output replacement) { map_[old] = replacement; }
  void copy(const Node& node) {
    std::vector<Output> inputs;
    for (const Output& in : node.inputs) inputs.push_back(map(in));
    int id = target_.add_node(node.op, inputs, node.attrs, node.name);
    target_.mutable_node(id).device = node.device;
    for (int i = 0; i < static_cast<int>(node.outputs.size()); ++i) set({node.id, i}, {id, i});
  }
  std::vector<Output> mapped(const std::vector<Output>& outputs) const {
    std::vector<Output> out;
    for (const Output& o : outputs) out.push_back(map(o));
    return out;
  }
  // The single node reading output 0 of `id`, if exactly one does and it is not a graph output.
  const Node* sole_consumer(int id) const {
    if (uses(id) != 1 || is_graph_output(id)) return nullptr;
    const auto& [reader, input] = readers(id).front();
    const Node& node = source_.node(reader);
    return node.inputs[static_cast<size_t>(input)].index == 0 ? &node : nullptr;
  }

 private:
  const Graph& source_;
  std::vector<Output> outputs_;
  Graph target_;
  std::vector<bool> needed_;
  std::vector<int> uses_;
  std::map<Output, Output> map_;
  std::map<Output, int> output_uses_;
  std::map<int, std::vector<std::pair<int, int>>> readers_;
};

// The value of a Const node's output, or null for any other node.
inline const Tensor* const_value(const Graph& g, Output o) {
  const Node& n = g.node(o.node);
  return n.op == "Const" ? &n.attrs.get_tensor("value") : nullptr;
}

// The Relu or Relu6 that alone reads output 0 of node `id`, which a fused node can apply; null
// when there is none.
inline const Node* fusable_activation(const Rewriter& rw, int id) {
  const Node* act = rw.sole_consumer(id);
  return act && (act->op == "Relu" || act->op == "Relu6") ? act : nullptr;
}

// A fused node's "activation" attribute for a Relu / Relu6 node.
inline std::string activation_attr(const Node& activation) {
  return activation.op == "Relu" ? "relu" : "relu6";
}

}  // namespace sf
