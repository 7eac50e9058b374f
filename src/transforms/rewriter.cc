#include "transforms/rewriter.h"

#include "core/error.h"

namespace sf {

Output Rewriter::map(Output old) const {
  auto it = map_.find(old);
  SF_CHECK(it != map_.end(), "rewrite: node '{}' output {} was not mapped",
           source_.node(old.node).name, old.index);
  return it->second;
}

std::optional<Output> Rewriter::find(Output old) const {
  auto it = map_.find(old);
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

std::vector<Output> Rewriter::mapped(const std::vector<Output>& outputs) const {
  std::vector<Output> out;
  for (const Output& o : outputs) out.push_back(map(o));
  return out;
}

void Rewriter::copy(const Node& node, const std::vector<Output>& inputs) {
  const int id = target_.add_node(node.op, inputs, node.attrs, node.name);
  target_.mutable_node(id).device = node.device;
  for (int i = 0; i < static_cast<int>(node.outputs.size()); ++i) set({node.id, i}, {id, i});
}

void Rewriter::copy_needed(const GraphUses& uses, const std::function<bool(const Node&)>& replace) {
  for (const Node& node : source_.nodes())
    if (uses.needed(node.id) && !replace(node)) copy(node);
}

Graph Rewriter::finish(std::vector<Output>& outputs) {
  outputs = mapped(outputs);
  return std::move(target_);
}

}  // namespace sf
