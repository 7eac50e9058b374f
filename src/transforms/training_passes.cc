#include "transforms/training_passes.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>

#include "core/activation.h"
#include "ops/conv_geometry.h"
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
// (which the replaced node's id must precede: nodes are copied in id order): the outputs of the
// absorbed node that `fuse` mapped, else the fused node's output 0.
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
      if (a == absorbed.end())
        inputs.push_back(rw.map(in));
      else if (std::optional<Output> fused = rw.find(in))  // an output `fuse` mapped
        inputs.push_back(*fused);
      else
        inputs.push_back(rw.map(Output{a->second, 0}));
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

namespace {

bool same_axis(const Window1D& a, const Window1D& b) {
  return a.in == b.in && a.k == b.k && a.stride == b.stride && a.dilation == b.dilation &&
         a.pad_before == b.pad_before && a.pad_after == b.pad_after && a.out == b.out;
}

// Whether a and b are asked to run in the same place: one is colocated with the other (a
// gradient with its forward node) or both with a third, which placement holds to, or they make
// the same requests.
bool same_place(const Node& a, const Node& b) {
  if (a.colocate_with == b.name || b.colocate_with == a.name ||
      (!a.colocate_with.empty() && a.colocate_with == b.colocate_with))
    return true;
  return a.requested_device == b.requested_device && a.device == b.device &&
         a.colocate_with.empty();
}

// Whether the output an activation (Relu or Relu6) reads, x, is read by the activation and its
// gradients (as their x) alone and is not a graph output, and every reader of x's node comes
// after the activation: a node fused in the activation's place (nodes are copied in id order)
// is then copied before them all.
bool only_activation_and_its_grads_read(const Graph& graph, const std::vector<Output>& outputs,
                                        const GraphUses& uses, const Node& activation) {
  const Output x = activation.inputs[0];
  if (std::find(outputs.begin(), outputs.end(), x) != outputs.end()) return false;
  const char* grad_op =
      activation.op == op_names::kRelu ? op_names::kReluGrad : op_names::kRelu6Grad;
  for (const auto& [reader, input] : uses.readers(x.node)) {
    if (reader == activation.id) continue;
    const Node& r = graph.node(reader);
    const bool reads_x = r.inputs[static_cast<size_t>(input)] == x;
    if (reader < activation.id || (reads_x && (r.op != grad_op || input != 1))) return false;
  }
  return true;
}

}  // namespace

Graph route_max_pool_grads_by_window_argmax(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  std::map<int, int> pairs;  // MaxPool node -> the one MaxPoolGrad of its output
  std::set<int> shared;      // MaxPools whose output more than one MaxPoolGrad reads
  for (const Node& pool_grad : graph.nodes()) {
    if (pool_grad.op != op_names::kMaxPoolGrad) continue;
    const Node& pool = graph.node(pool_grad.inputs[1].node);
    if (pool.op != op_names::kMaxPool || pool.inputs[0] != pool_grad.inputs[0]) continue;
    const TensorType& x = graph.type(pool.inputs[0]);
    if (x.dtype != DType::f32 || x.shape.size() != 4 ||
        std::any_of(x.shape.begin(), x.shape.end(), [](int64_t d) { return d < 0; }))
      continue;
    const Window2D g = pool_window(pool.attrs, x.shape);
    const Window2D grad_g = pool_window(pool_grad.attrs, x.shape);
    // Only where the argmax kernel (kernels/float_loops.h) takes the gradient: tiling windows.
    if (!same_axis(g.h, grad_g.h) || !same_axis(g.w, grad_g.w) || !windows_tile(g.h) ||
        !windows_tile(g.w) || g.h.k * g.w.k > kNoWindowArgmax || !same_place(pool_grad, pool))
      continue;
    if (!pairs.emplace(pool.id, pool_grad.id).second) shared.insert(pool.id);
  }
  for (int pool : shared) pairs.erase(pool);
  std::map<int, int> grads;  // MaxPoolGrad node -> its MaxPool
  for (const auto& [pool, grad] : pairs) grads[grad] = pool;
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (auto p = pairs.find(node.id); p != pairs.end()) {
      Attrs attrs = node.attrs;
      attrs.set("relu", graph.node(p->second).attrs.get_bool("relu"));
      copy_whole(rw, node, std::move(attrs), op_names::kMaxPoolWindowArgmax, node.name,
                 rw.mapped(node.inputs), node, {});
    } else if (auto g = grads.find(node.id); g != grads.end()) {
      const Node& pool = graph.node(g->second);
      Attrs attrs = pool.attrs;
      attrs.set("input_shape", graph.type(pool.inputs[0]).shape);
      const Output argmax{rw.map({pool.id, 0}).node, 1};
      copy_whole(rw, node, std::move(attrs), op_names::kMaxPoolGradWindowArgmax, node.name,
                 {rw.map(node.inputs[2]), argmax}, node, {});
    } else {
      copy_whole(rw, node, node.attrs, node.op, node.name, rw.mapped(node.inputs), node, {});
    }
    return true;
  });
  return rw.finish(outputs);
}

Graph fold_relu_into_bias_add(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  std::map<int, int> folded;  // Relu node -> the BiasAdd it absorbs
  for (const Node& relu : graph.nodes()) {
    if (relu.op != op_names::kRelu) continue;
    const Node& bias_add = graph.node(relu.inputs[0].node);
    if (bias_add.op == op_names::kBiasAdd &&
        only_activation_and_its_grads_read(graph, outputs, uses, relu))
      folded[relu.id] = bias_add.id;
  }
  // A ReluGrad reading an absorbed BiasAdd reads the BiasAddRelu (its Relu's output).
  return fold_pairs(graph, outputs, uses, folded,
                    [](Rewriter& rw, const Node& relu, const Node& bias_add,
                       const std::map<std::string, std::string>& renamed) {
                      copy_whole(rw, bias_add, {}, op_names::kBiasAddRelu, bias_add.name,
                                 rw.mapped(bias_add.inputs), relu, renamed);
                    });
}

Graph fold_activation_into_batch_norm(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  std::map<int, int> folded;  // Relu or Relu6 node -> the BatchNorm it absorbs
  for (const Node& relu : graph.nodes()) {
    if (relu.op != op_names::kRelu && relu.op != op_names::kRelu6) continue;
    const Node& batch_norm = graph.node(relu.inputs[0].node);
    // The statistics' other readers (the gradient; the moving averages are graph outputs) come
    // after the activation too.
    if (batch_norm.op == op_names::kBatchNorm && relu.inputs[0].index == 0 &&
        same_place(relu, batch_norm) &&
        only_activation_and_its_grads_read(graph, outputs, uses, relu))
      folded[relu.id] = batch_norm.id;
  }
  return fold_pairs(
      graph, outputs, uses, folded,
      [](Rewriter& rw, const Node& relu, const Node& batch_norm,
         const std::map<std::string, std::string>& renamed) {
        Attrs attrs = batch_norm.attrs;
        attrs.set("activation", activation_name(relu.op == op_names::kRelu ? Activation::Relu
                                                                           : Activation::Relu6));
        copy_whole(rw, batch_norm, std::move(attrs), op_names::kFusedBatchNorm, batch_norm.name,
                   rw.mapped(batch_norm.inputs), batch_norm, renamed);
        rw.set({relu.id, 0}, rw.map({batch_norm.id, 0}));
      });
}

Graph fold_activation_grad_into_batch_norm_grad(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  std::map<int, int> folded;  // BatchNormGrad node -> the ReluGrad or Relu6Grad it absorbs
  for (const Node& batch_norm_grad : graph.nodes()) {
    if (batch_norm_grad.op != op_names::kBatchNormGrad) continue;
    const Output dy = batch_norm_grad.inputs[0];
    const Node& activation_grad = graph.node(dy.node);
    if ((activation_grad.op == op_names::kReluGrad || activation_grad.op == op_names::kRelu6Grad) &&
        uses.sole_consumer(activation_grad.id) == &batch_norm_grad &&
        same_place(batch_norm_grad, activation_grad))
      folded[batch_norm_grad.id] = activation_grad.id;
  }
  return fold_pairs(
      graph, outputs, uses, folded,
      [](Rewriter& rw, const Node& batch_norm_grad, const Node& activation_grad,
         const std::map<std::string, std::string>& renamed) {
        Attrs attrs = batch_norm_grad.attrs;
        attrs.set("activation",
                  activation_name(activation_grad.op == op_names::kReluGrad ? Activation::Relu
                                                                            : Activation::Relu6));
        std::vector<Output> inputs{rw.map(activation_grad.inputs[0])};
        for (size_t i = 1; i < batch_norm_grad.inputs.size(); ++i)
          inputs.push_back(rw.map(batch_norm_grad.inputs[i]));
        inputs.push_back(rw.map(activation_grad.inputs[1]));
        copy_whole(rw, activation_grad, std::move(attrs), op_names::kFusedBatchNormGrad,
                   activation_grad.name, inputs, batch_norm_grad, renamed);
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
    if (same_place(bias_add, conv)) folded[bias_add.id] = conv.id;
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

Graph fuse_single_channel_conv_into_max_pool(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  std::map<int, int> folded;  // MaxPoolWindowArgmax node -> the FusedConv2D it absorbs
  for (const Node& pool : graph.nodes()) {
    if (pool.op != op_names::kMaxPoolWindowArgmax) continue;
    const Node& conv = graph.node(pool.inputs[0].node);
    if (conv.op != op_names::kFusedConv2D || conv.inputs.size() != 3 ||
        uses.sole_consumer(conv.id) != &pool || uses.is_graph_output(conv.id) ||
        !same_place(pool, conv))
      continue;
    // The convs kernels/float_loops.h runs in one pass with their pool.
    const TensorType& x = graph.type(conv.inputs[0]);
    if (x.dtype == DType::f32 && x.shape.size() == 4 && x.shape[3] == 1 &&
        conv.attrs.get_int("groups") == 1)
      folded[pool.id] = conv.id;
  }
  return fold_pairs(graph, outputs, uses, folded,
                    [](Rewriter& rw, const Node& pool, const Node& conv,
                       const std::map<std::string, std::string>& renamed) {
                      Attrs attrs = conv.attrs;
                      for (const char* name : kPoolWindowAttrNames)
                        attrs.set(prefixed_pool_attr(name), pool.attrs.all().at(name));
                      attrs.set("relu", pool.attrs.get_bool("relu"));
                      copy_whole(rw, conv, std::move(attrs), op_names::kFusedConv2DMaxPool,
                                 conv.name, rw.mapped(conv.inputs), pool, renamed);
                    });
}

Graph fuse_single_channel_conv_grads_into_pool_grad(const Graph& graph,
                                                    std::vector<Output>& outputs) {
  const GraphUses uses = uses_keeping_every_node(graph, outputs);
  struct Fusion {
    int pool_grad, filter_grad, bias_grad;
  };
  // The pool's gradient stays for the readers the outputs do not need (a first conv's input
  // gradient), which keep it from running.
  const std::vector<bool> needed = needed_nodes(graph, outputs);
  std::map<int, Fusion> at;  // the first of the filter and bias gradients -> its fusion
  std::set<int> dropped;     // the other one
  for (const Node& pool_grad : graph.nodes()) {
    if (pool_grad.op != op_names::kMaxPoolGradWindowArgmax || uses.is_graph_output(pool_grad.id))
      continue;
    const Node& conv = graph.node(pool_grad.inputs[1].node);
    if (conv.op != op_names::kFusedConv2DMaxPool || pool_grad.inputs[1].index != 1) continue;
    // Read by exactly the conv's filter gradient (of the same x) and its bias gradient.
    int filter_grad = -1, bias_grad = -1;
    for (const auto& [reader, input] : uses.readers(pool_grad.id)) {
      if (!needed[static_cast<size_t>(reader)]) continue;
      const Node& r = graph.node(reader);
      if (r.op == op_names::kConv2DBackpropFilter && input == 1 && r.inputs[0] == conv.inputs[0] &&
          filter_grad < 0)
        filter_grad = reader;
      else if (r.op == op_names::kBiasAddGrad && bias_grad < 0)
        bias_grad = reader;
      else
        filter_grad = bias_grad = -2;
    }
    if (filter_grad < 0 || bias_grad < 0) continue;
    const Node& fg = graph.node(filter_grad);
    const Node& bg = graph.node(bias_grad);
    const Shape& x = graph.type(conv.inputs[0]).shape;
    const Shape& w = graph.type(conv.inputs[1]).shape;
    if (fg.attrs.get_ints("filter_shape") != w || !same_place(fg, pool_grad) ||
        !same_place(bg, pool_grad) || graph.type(conv.inputs[0]).dtype != DType::f32)
      continue;
    const Window2D g = conv_window(conv.attrs, x, w), fg_g = conv_window(fg.attrs, x, w);
    if (!same_axis(g.h, fg_g.h) || !same_axis(g.w, fg_g.w) || fg.attrs.get_int("groups") != 1)
      continue;
    at[std::min(filter_grad, bias_grad)] = Fusion{pool_grad.id, filter_grad, bias_grad};
    dropped.insert(std::max(filter_grad, bias_grad));
  }
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (dropped.count(node.id)) return true;
    auto f = at.find(node.id);
    if (f == at.end()) {
      copy_whole(rw, node, node.attrs, node.op, node.name, rw.mapped(node.inputs), node, {});
      return true;
    }
    // Every input is older than the pool's gradient, which both gradients read.
    const Node& pool_grad = graph.node(f->second.pool_grad);
    const Node& filter_grad = graph.node(f->second.filter_grad);
    const Node& conv = graph.node(pool_grad.inputs[1].node);
    Attrs attrs = filter_grad.attrs;
    for (const char* name : kPoolWindowAttrNames)
      attrs.set(prefixed_pool_attr(name), conv.attrs.all().at(prefixed_pool_attr(name)));
    copy_whole(
        rw, filter_grad, std::move(attrs), op_names::kFusedConv2DMaxPoolGrad, filter_grad.name,
        {rw.map(filter_grad.inputs[0]), rw.map(pool_grad.inputs[0]), rw.map(pool_grad.inputs[1])},
        filter_grad, {});
    const int fused = rw.map({filter_grad.id, 0}).node;
    rw.set({f->second.bias_grad, 0}, {fused, 1});
    return true;
  });
  return rw.finish(outputs);
}

Graph rewrite_training_graph(const Graph& graph, std::vector<Output>& outputs) {
  Graph pooled = route_max_pool_grads_by_window_argmax(
      fold_relu_grad_into_max_pool_grad(graph, outputs), outputs);
  Graph fused = fold_bias_into_conv(
      fold_activation_grad_into_batch_norm_grad(
          fold_activation_into_batch_norm(fold_relu_into_bias_add(pooled, outputs), outputs),
          outputs),
      outputs);
  Graph pooled_conv = fuse_single_channel_conv_into_max_pool(fused, outputs);
  return fuse_single_channel_conv_grads_into_pool_grad(pooled_conv, outputs);
}

}  // namespace sf
