#include "quantize/learned_ranges.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace sf {

namespace {

// The learned [min, max] of a FakeQuantActivation, when it can be taken.
std::optional<TensorRange> learned_range(const Graph& graph, const Node& node) {
  if (node.inputs[0].index != 0) return std::nullopt;  // ranges are keyed by output 0
  const Node& range = graph.node(node.inputs[1].node);
  if (range.op != "Const") return std::nullopt;
  const float* r = range.attrs.get_tensor("value").data<float>();
  if (!std::isfinite(r[0]) || !std::isfinite(r[1])) return std::nullopt;
  return TensorRange{std::min(r[0], 0.0f), std::max(r[1], 0.0f)};
}

}  // namespace

bool has_fake_quant(const Graph& graph) {
  return std::any_of(graph.nodes().begin(), graph.nodes().end(),
                     [](const Node& n) { return n.op == "FakeQuantActivation"; });
}

LearnedRanges take_learned_ranges(const Graph& graph, const std::vector<std::string>& outputs) {
  const std::set<std::string> output_names(outputs.begin(), outputs.end());
  std::set<Output> read;
  for (const Node& n : graph.nodes()) read.insert(n.inputs.begin(), n.inputs.end());
  std::set<int> removed, range_consts;
  LearnedRanges out;
  for (const Node& n : graph.nodes()) {
    if (n.op != "FakeQuantActivation" || output_names.count(n.name) || read.count({n.id, 1}))
      continue;
    if (auto range = learned_range(graph, n)) {
      removed.insert(n.id);
      range_consts.insert(n.inputs[1].node);
      out.ranges[graph.node(n.inputs[0].node).name] = *range;
    }
  }
  // A range Const read by anything else stays.
  for (const Node& n : graph.nodes())
    if (!removed.count(n.id))
      for (const Output& in : n.inputs) range_consts.erase(in.node);

  std::map<Output, Output> mapped;
  for (const Node& n : graph.nodes()) {
    if (range_consts.count(n.id)) continue;
    if (removed.count(n.id)) {
      mapped[{n.id, 0}] = mapped.at(n.inputs[0]);
      continue;
    }
    std::vector<Output> inputs;
    for (const Output& in : n.inputs) inputs.push_back(mapped.at(in));
    const int id = out.graph.add_node(n.op, inputs, n.attrs, n.name);
    out.graph.mutable_node(id).device = n.device;
    for (int i = 0; i < static_cast<int>(n.outputs.size()); ++i) mapped[{n.id, i}] = {id, i};
  }
  return out;
}

}  // namespace sf
