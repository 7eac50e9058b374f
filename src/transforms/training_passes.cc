#include "transforms/training_passes.h"

#include <functional>
#include <map>
#include <numeric>
#include <string>

#include "core/activation.h"
#include "ops/op_names.h"
#include "transforms/rewriter.h"

namespace sf {

namespace {

GraphUses uses_keeping_every_node(const Graph& graph, const std::vector<Output>& outputs) {
  std::vector<int> every_node(static_cast<size_t>(graph.num_nodes()));
  std::iota(every_node.begin(), every_node.end(), 0);
  return GraphUses(graph, outputs, every_node);
}

// Adds `source` (op, attributes, inputs mapped) to the target with its name and placement
// fields, its outputs standing for those of `stands_for`. Colocations with nodes folded away
// follow them (`renamed`).
void copy_whole(Rewriter& rw, const Node& source, Attrs attrs, const std::string& op,
                const std::string& name, const std::vector<Output>& inputs, const Node& stands_for,
                const std::map<std::string, std::string>& renamed) {
  const int id = rw.target().add_node(op, inputs, std::move(attrs), name);
  Node& copy = rw.target().mutable_node(id);
  copy.device = source.device;
  copy.requested_device = source.requested_device;
  auto r = renamed.find(source.colocate_with);
  copy.colocate_with = r == renamed.end() ? source.colocate_with : r->second;
  for (int i = 0; i < static_cast<int>(stands_for.outputs.size()); ++i)
    rw.set({stands_for.id, i}, {id, i});
}

// Copies `graph` with each key of `folded` replaced by what `fuse` adds in its place, named as
// the node it absorbs (the key's value), which is left out. Colocations with the replaced node
// follow the absorbed one's name, and other readers of the absorbed node read the fused one
// (which the replaced node's id must precede: nodes are copied in id order).
using Fuse = std::function<void(Rewriter& rw, const Node& replaced, const Node& absorbed,
                                const std::map<std::string, std::string>& renamed)>;
Graph fold_pairs(const Graph& graph, std::vector<Output>& outputs, const GraphUses& uses,
                 const std::map<int, int>& folded, const Fuse& fuse) {
  std::map<int, int> absorbed;  // absorbed node -> the node that replaces it
  std::map<std::string, std::string> renamed;
  for (const auto& [replaced, absorbs] : folded) {
    absorbed[absorbs] = replaced;
    renamed[graph.node(replaced).name] = graph.node(absorbs).name;
  }
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (absorbed.count(node.id)) return true;
    auto f = folded.find(node.id);
    if (f != folded.end()) {
      fuse(rw, node, graph.node(f->second), renamed);
      return true;
    }
    std::vector<Output> inputs;
    for (const Output& in : node.inputs) {
      auto a = absorbed.find(in.node);
      inputs.push_back(rw.map(a == absorbed.end() ? in : Output{a->second, 0}));
    }
    copy_whole(rw, node, node.attrs, node.op, node.name, inputs, node, renamed);
    return true;
  });
  return rw.finish(outputs);
}

}  // namespace

Graph fold_relu_grad_into_max_pool_grad(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
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
  return fold_pairs(graph, outputs, uses, folded,
                    [](Rewriter& rw, const Node& relu_grad, const Node& pool_grad,
                       const std::map<std::string, std::string>& renamed) {
                      Attrs attrs = pool_grad.attrs;
                      attrs.set("relu", true);
                      copy_whole(rw, pool_grad, std::move(attrs), pool_grad.op, pool_grad.name,
                                 rw.mapped(pool_grad.inputs), relu_grad, renamed);
                    });
}

Graph fold_relu_into_bias_add(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  std::map<int, int> folded;  // Relu node -> the BiasAdd it absorbs
  for (const Node& relu : graph.nodes()) {
    if (relu.op != op_names::kRelu) continue;
    const Node& bias_add = graph.node(relu.inputs[0].node);
    if (bias_add.op != op_names::kBiasAdd || uses.is_graph_output(bias_add.id)) continue;
    // Nodes are copied in id order, so the ReluGrads must come after the Relu they will read.
    bool only_relu_and_its_grads = true;
    for (const auto& [reader, input] : uses.readers(bias_add.id)) {
      const Node& r = graph.node(reader);
      only_relu_and_its_grads =
          only_relu_and_its_grads &&
          (reader == relu.id || (r.op == op_names::kReluGrad && input == 1 && reader > relu.id));
    }
    if (only_relu_and_its_grads) folded[relu.id] = bias_add.id;
  }
  // A ReluGrad reading an absorbed BiasAdd reads the BiasAddRelu (its Relu's output).
  return fold_pairs(graph, outputs, uses, folded,
                    [](Rewriter& rw, const Node& relu, const Node& bias_add,
                       const std::map<std::string, std::string>& renamed) {
                      copy_whole(rw, bias_add, {}, op_names::kBiasAddRelu, bias_add.name,
                                 rw.mapped(bias_add.inputs), relu, renamed);
                    });
}

Graph fold_bias_into_conv(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  std::map<int, int> folded;  // BiasAdd or BiasAddRelu node -> the Conv2D it absorbs
  for (const Node& bias_add : graph.nodes()) {
    if (bias_add.op != op_names::kBiasAdd && bias_add.op != op_names::kBiasAddRelu) continue;
    const Node& conv = graph.node(bias_add.inputs[0].node);
    if (conv.op != op_names::kConv2D || uses.sole_consumer(conv.id) != &bias_add) continue;
    // One node runs both, so both must be asked to run in the same place.
    const bool same_place =
        bias_add.requested_device == conv.requested_device && bias_add.device == conv.device &&
        (bias_add.colocate_with.empty() || bias_add.colocate_with == conv.colocate_with ||
         bias_add.colocate_with == conv.name);
    if (same_place) folded[bias_add.id] = conv.id;
  }
  return fold_pairs(
      graph, outputs, uses, folded,
      [](Rewriter& rw, const Node& bias_add, const Node& conv,
         const std::map<std::string, std::string>& renamed) {
        Attrs attrs = conv.attrs;
        attrs.set("activation", activation_name(bias_add.op == op_names::kBiasAddRelu
                                                    ? Activation::Relu
                                                    : Activation::None));
        copy_whole(rw, conv, std::move(attrs), op_names::kFusedConv2D, conv.name,
                   {rw.map(conv.inputs[0]), rw.map(conv.inputs[1]), rw.map(bias_add.inputs[1])},
                   bias_add, renamed);
      });
}

Graph rewrite_training_graph(const Graph& graph, std::vector<Output>& outputs) {
  Graph pooled = fold_relu_grad_into_max_pool_grad(graph, outputs);
  return fold_bias_into_conv(fold_relu_into_bias_add(pooled, outputs), outputs);
}

}  // namespace sf
