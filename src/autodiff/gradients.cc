#include "autodiff/gradients.h"

#include <map>

#include "graph/op_registry.h"
#include "ops/ops.h"

namespace sf {

std::vector<Output> gradients(Graph& graph, Output loss, const std::vector<Output>& wrt) {
  const TensorType& loss_type = graph.type(loss);
  if (loss_type.dtype != DType::f32 || !loss_type.shape.empty())
    fail("gradients: loss '{}' must be a scalar f32, got {}", graph.node(loss.node).name,
         type_str(loss_type));

  // Nodes on a path from some wrt to the loss.
  const int count = loss.node + 1;
  const std::vector<bool> reaches_loss = needed_nodes(graph, {loss});
  std::vector<bool> from_wrt(static_cast<size_t>(count), false);
  for (const Output& w : wrt)
    if (w.node < count) from_wrt[static_cast<size_t>(w.node)] = true;
  for (int id = 0; id < count; ++id)
    for (const Output& in : graph.node(id).inputs)
      if (from_wrt[static_cast<size_t>(in.node)]) from_wrt[static_cast<size_t>(id)] = true;

  // Gradient contributions per output, summed lazily.
  // Gradient nodes are colocated with the forward node they differentiate, so placement keeps
  // each layer's backward pass on the layer's device.
  auto colocate_new_nodes = [&](int first_new, int forward) {
    for (int k = first_new; k < graph.num_nodes(); ++k)
      if (graph.node(k).colocate_with.empty())
        graph.mutable_node(k).colocate_with = graph.node(forward).name;
  };
  std::map<Output, std::vector<Output>> pending;
  pending[loss].push_back(ops::scalar(graph, 1.0f, graph.unique_name("gradients/seed")));
  colocate_new_nodes(graph.num_nodes() - 1, loss.node);
  auto total = [&](Output out) -> Output {
    auto it = pending.find(out);
    if (it == pending.end() || it->second.empty()) return Output{};
    if (it->second.size() > 1) {
      const int first_new = graph.num_nodes();
      Output sum = ops::add_n(graph, it->second,
                              graph.unique_name(graph.node(out.node).name + "/grad/sum"));
      colocate_new_nodes(first_new, out.node);
      it->second = {sum};
    }
    return it->second[0];
  };

  for (int id = loss.node; id >= 0; --id) {
    if (!reaches_loss[static_cast<size_t>(id)] || !from_wrt[static_cast<size_t>(id)]) continue;
    const Node node = graph.node(id);  // copy: the graph grows below
    std::vector<Output> output_grads;
    bool any = false;
    for (int i = 0; i < static_cast<int>(node.outputs.size()); ++i) {
      output_grads.push_back(total(Output{id, i}));
      any = any || output_grads.back().valid();
    }
    if (!any || node.inputs.empty()) continue;
    bool needs_input_grads = false;
    for (const Output& in : node.inputs)
      if (from_wrt[static_cast<size_t>(in.node)]) needs_input_grads = true;
    if (!needs_input_grads) continue;
    const OpDef& def = OpRegistry::global().get(node.op, "gradients");
    if (!def.grad) fail("node '{}' ({}): op has no gradient", node.name, node.op);
    GradContext ctx{graph, node, output_grads};
    const int first_new = graph.num_nodes();
    std::vector<Output> input_grads = def.grad(ctx);
    colocate_new_nodes(first_new, id);
    SF_CHECK(input_grads.size() == node.inputs.size(), "gradient of {} returned {} entries",
             node.op, input_grads.size());
    for (size_t i = 0; i < input_grads.size(); ++i) {
      if (!input_grads[i].valid() || !from_wrt[static_cast<size_t>(node.inputs[i].node)]) continue;
      const TensorType& want = graph.type(node.inputs[i]);
      const TensorType& got = graph.type(input_grads[i]);
      SF_CHECK(want.shape == got.shape, "gradient of {} for input {} is {}, input is {}", node.op,
               i, type_str(got), type_str(want));
      pending[node.inputs[i]].push_back(input_grads[i]);
    }
  }

  std::vector<Output> result;
  for (const Output& w : wrt) result.push_back(total(w));
  return result;
}

}  // namespace sf
