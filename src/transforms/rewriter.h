// The copying half of the graph-rewrite toolkit (graph_uses.h is the analysis half): copies
// nodes from a source graph into a new one, remapping inputs, while a pass decides per node
// whether to copy it, drop it (forwarding an input) or replace a group of nodes.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "graph/graph.h"
#include "transforms/graph_uses.h"

namespace sf {

class Rewriter {
 public:
  explicit Rewriter(const Graph& source) : source_(source) {}

  Graph& target() { return target_; }
  // Where a source output went; fails when it was never mapped.
  Output map(Output old) const;
  std::optional<Output> find(Output old) const;
  void set(Output old, Output replacement) { map_[old] = replacement; }
  std::vector<Output> mapped(const std::vector<Output>& outputs) const;

  // Adds `node` to the target (name, attributes, device) reading `inputs`, and maps its outputs
  // to the copy's.
  void copy(const Node& node, const std::vector<Output>& inputs);
  // The same, reading the mapped forms of the node's own inputs.
  void copy(const Node& node) { copy(node, mapped(node.inputs)); }
  // Visits the needed nodes in order: `replace` handles a node (setting what its outputs map to,
  // or leaving it out) and returns true, or returns false to have it copied.
  void copy_needed(const GraphUses& uses, const std::function<bool(const Node&)>& replace);
  // The target graph, `outputs` mapped into it.
  Graph finish(std::vector<Output>& outputs);

 private:
  const Graph& source_;
  Graph target_;
  std::map<Output, Output> map_;
};

}  // namespace sf
