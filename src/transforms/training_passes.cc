#include "transforms/training_passes.h"

#include <map>
#include <numeric>

#include "ops/op_names.h"
#include "transforms/rewriter.h"

namespace sf {

Graph fold_relu_grad_into_max_pool_grad(const Graph& graph, std::vector<Output>& outputs) {
  std::vector<int> every_node(static_cast<size_t>(graph.num_nodes()));
  std::iota(every_node.begin(), every_node.end(), 0);
  const GraphUses uses(graph, outputs, every_node);
  std::map<int, int> folded;  // ReluGrad node -> the MaxPoolGrad it absorbs
  for (const Node& relu_grad : graph.nodes()) {
    if (relu_grad.op != op_names::kReluGrad) continue;
    const Node& pool_grad = graph.node(relu_grad.inputs[0].node);
    if (pool_grad.op != op_names::kMaxPoolGrad || pool_grad.attrs.get_bool("relu") ||
        uses.sole_consumer(pool_grad.id) != &relu_grad)
      continue;
    // The ReluGrad is the gradient of the Relu whose output was pooled: dx is zero where that
    // output is not positive, which the routed position's x (= y) tells.
    const Node& relu = graph.node(pool_grad.inputs[0].node);
    if (relu.op != op_names::kRelu || relu.inputs[0] != relu_grad.inputs[1]) continue;
    folded[relu_grad.id] = pool_grad.id;
  }
  std::map<int, bool> absorbed;
  for (const auto& [relu_grad, pool_grad] : folded) absorbed[pool_grad] = true;
  // Nodes are copied whole: placement has not run yet, so their placement requests and
  // colocations go along.
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (absorbed.count(node.id)) return true;
    auto f = folded.find(node.id);
    const Node& source = f == folded.end() ? node : graph.node(f->second);
    Attrs attrs = source.attrs;
    if (f != folded.end()) attrs.set("relu", true);
    const int id =
        rw.target().add_node(source.op, rw.mapped(source.inputs), std::move(attrs), source.name);
    Node& copy = rw.target().mutable_node(id);
    copy.device = source.device;
    copy.requested_device = source.requested_device;
    copy.colocate_with = source.colocate_with;
    for (int i = 0; i < static_cast<int>(node.outputs.size()); ++i) rw.set({node.id, i}, {id, i});
    return true;
  });
  return rw.finish(outputs);
}

}  // namespace sf
