// The analysis half of the graph-rewrite toolkit (rewriter.h is the copying half): which nodes
// a graph's outputs need (needed_nodes in graph/graph.h, which the session's plans and autodiff
// use too) and who reads each node. The inference and execution passes, the eightbit rewrite,
// learned ranges and the ONNX exporter all ask it.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "core/activation.h"
#include "graph/graph.h"

namespace sf {

class GraphUses {
 public:
  // Needed: what `outputs` (the graph's outputs) and the `kept` nodes depend on. Counts the
  // reads of needed nodes and of `outputs`; a node read by unneeded nodes only is unread.
  GraphUses(const Graph& graph, const std::vector<Output>& outputs,
            const std::vector<int>& kept = {});
  // Every node needed, no graph outputs: the reads of all nodes.
  static GraphUses of_all_nodes(const Graph& graph);

  bool needed(int id) const { return needed_[static_cast<size_t>(id)]; }
  // How many inputs (and graph outputs) read any output of this node.
  int uses(int id) const { return uses_[static_cast<size_t>(id)]; }
  bool is_graph_output(int id) const;
  // Whether an input or a graph output reads this output.
  bool is_read(Output o) const { return output_uses_.count(o) > 0; }
  // Every (node, input index) reading any output of node `id`.
  const std::vector<std::pair<int, int>>& readers(int id) const;
  // Whether anything reads outputs other than output 0 of this node.
  bool side_outputs_used(const Node& node) const;
  // The single node reading output 0 of `id`, if exactly one does and it is not a graph output.
  const Node* sole_consumer(int id) const;

 private:
  const Graph& graph_;
  std::vector<Output> outputs_;
  std::vector<bool> needed_;
  std::vector<int> uses_;
  std::map<Output, int> output_uses_;
  std::map<int, std::vector<std::pair<int, int>>> readers_;
};

// The value of a Const node's output, or null for any other node.
const Tensor* const_value(const Graph& graph, Output o);

// The Relu or Relu6 that alone reads output 0 of node `id`, which a fused node can apply; null
// when there is none.
const Node* fusable_activation(const GraphUses& uses, int id);
// What a fused node applies in place of `relu` (a Relu or Relu6 node); None when null.
Activation fused_activation(const Node* relu);

}  // namespace sf
