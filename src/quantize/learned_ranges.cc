#include "quantize/learned_ranges.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "ops/op_names.h"
#include "transforms/graph_uses.h"
#include "transforms/rewriter.h"

namespace sf {

namespace {

// The learned [min, max] of a FakeQuantActivation, when it can be taken.
std::optional<TensorRange> learned_range(const Graph& graph, const Node& node) {
  if (node.inputs[0].index != 0) return std::nullopt;  // ranges are keyed by output 0
  const Node& range = graph.node(node.inputs[1].node);
  if (range.op != op_names::kConst) return std::nullopt;
  const float* r = range.attrs.get_tensor("value").data<float>();
  if (!std::isfinite(r[0]) || !std::isfinite(r[1])) return std::nullopt;
  return TensorRange{std::min(r[0], 0.0f), std::max(r[1], 0.0f)};
}

}  // namespace

bool has_fake_quant(const Graph& graph) {
  return std::any_of(graph.nodes().begin(), graph.nodes().end(),
                     [](const Node& n) { return n.op == op_names::kFakeQuantActivation; });
}

LearnedRanges take_learned_ranges(const Graph& graph, const std::vector<std::string>& outputs) {
  const std::set<std::string> output_names(outputs.begin(), outputs.end());
  const GraphUses uses = GraphUses::of_all_nodes(graph);
  std::set<int> removed, range_consts;
  LearnedRanges out;
  for (const Node& n : graph.nodes()) {
    if (n.op != op_names::kFakeQuantActivation || output_names.count(n.name) ||
        uses.is_read({n.id, 1}))
      continue;
    if (auto range = learned_range(graph, n)) {
      removed.insert(n.id);
      range_consts.insert(n.inputs[1].node);
      out.ranges[graph.node(n.inputs[0].node).name] = *range;
    }
  }
  // A range Const read by anything else stays.
  std::erase_if(range_consts, [&](int id) {
    for (const auto& [reader, input] : uses.readers(id))
      if (!removed.count(reader)) return true;
    return false;
  });

  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& n) {
    if (removed.count(n.id)) rw.set({n.id, 0}, rw.map(n.inputs[0]));
    return removed.count(n.id) || range_consts.count(n.id);
  });
  out.graph = std::move(rw.target());
  return out;
}

}  // namespace sf
