#include "transforms/inference_passes.h"

#include <cmath>
#include <map>

#include "codec/binary_weights.h"
#include "codec/weight_codec.h"
#include "core/error.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "transforms/graph_uses.h"
#include "transforms/rewriter.h"

namespace sf {

Graph freeze_variables(const Graph& graph, const VariableStore& variables,
                       std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (node.op == op_names::kVariable) {
      // Weights trained quantization-aware are stored as the forward pass saw them.
      const Node* fake_quant = uses.sole_consumer(node.id);
      if (fake_quant != nullptr && fake_quant->op == op_names::kFakeQuantWeights) {
        const auto bits = static_cast<int>(fake_quant->attrs.get_int("bits"));
        const Tensor& w = variables.get(node.name);
        Output c = ops::constant(
            rw.target(), quant::fake_quantize_linear(w, bits, static_cast<int>(w.rank()) - 1),
            node.name);
        rw.set({fake_quant->id, 0}, c);
        return true;
      }
      // Binarized weights likewise: sign * scale per channel, which freeze stores in 1-2 bits.
      if (fake_quant != nullptr && fake_quant->op == op_names::kBinarizeWeights) {
        const Tensor& w = variables.get(node.name);
        Output c = ops::constant(rw.target(),
                                 fake_quant->attrs.get_string("mode") == "ternary"
                                     ? quant::ternarize_weights(w)
                                     : quant::binarize_weights(w),
                                 node.name);
        rw.set({fake_quant->id, 0}, c);
        return true;
      }
      Output c = ops::constant(rw.target(), variables.get(node.name).clone(), node.name);
      rw.set({node.id, 0}, c);
      return true;
    }
    if ((node.op == op_names::kFakeQuantWeights || node.op == op_names::kBinarizeWeights) &&
        graph.node(node.inputs[0].node).op == op_names::kVariable &&
        uses.sole_consumer(node.inputs[0].node) == &node)
      return true;  // folded into its variable's constant above
    if (node.op == op_names::kDropout || node.op == op_names::kIdentity) {
      if (uses.side_outputs_used(node))
        fail("freeze: node '{}' ({}): its mask output is used, so it cannot be removed", node.name,
             node.op);
      rw.set({node.id, 0}, rw.map(node.inputs[0]));
      return true;
    }
    return false;
  });
  return rw.finish(outputs);
}

Graph fold_batch_norm(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  // BatchNorm id -> the conv/matmul and optional BiasAdd it folds into.
  struct Fold {
    int linear;
    int bias_add;  // -1 when absent
  };
  std::map<int, Fold> folds;
  std::map<int, int> member_of;  // linear/bias node -> BatchNorm id
  for (const Node& bn : graph.nodes()) {
    if (bn.op != op_names::kBatchNorm || !uses.needed(bn.id) || uses.side_outputs_used(bn))
      continue;
    int producer = bn.inputs[0].node;
    int bias_add = -1;
    if (graph.node(producer).op == op_names::kBiasAdd) {
      bias_add = producer;
      producer = graph.node(producer).inputs[0].node;
    }
    const Node& linear = graph.node(producer);
    if (linear.op != op_names::kConv2D && linear.op != op_names::kMatMul) continue;
    if (linear.op == op_names::kMatMul && linear.attrs.get_bool("transpose_b")) continue;
    bool foldable = const_value(graph, linear.inputs[1]) != nullptr;
    for (int i = 1; i <= 4; ++i) foldable = foldable && const_value(graph, bn.inputs[i]) != nullptr;
    if (bias_add >= 0) foldable = foldable && const_value(graph, graph.node(bias_add).inputs[1]);
    const Node* after_linear = uses.sole_consumer(linear.id);
    foldable = foldable && after_linear && after_linear->id == (bias_add >= 0 ? bias_add : bn.id);
    if (bias_add >= 0) {
      const Node* after_bias = uses.sole_consumer(bias_add);
      foldable = foldable && after_bias && after_bias->id == bn.id;
    }
    if (!foldable) continue;
    folds[bn.id] = Fold{linear.id, bias_add};
    member_of[linear.id] = bn.id;
    if (bias_add >= 0) member_of[bias_add] = bn.id;
  }

  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (member_of.count(node.id)) return true;
    auto fold = folds.find(node.id);
    if (fold == folds.end()) return false;
    // y = gamma * (w x + b - mean) / sqrt(var + eps) + beta, per output channel.
    const Node& linear = graph.node(fold->second.linear);
    const Tensor& w = *const_value(graph, linear.inputs[1]);
    const int64_t channels = w.dim(-1);
    const float* gamma = const_value(graph, node.inputs[1])->data<float>();
    const float* beta = const_value(graph, node.inputs[2])->data<float>();
    const float* mean = const_value(graph, node.inputs[3])->data<float>();
    const float* var = const_value(graph, node.inputs[4])->data<float>();
    const double eps = node.attrs.get_float("epsilon");
    Tensor new_w = w.clone();
    Tensor new_b(DType::f32, {channels});
    const float* old_b =
        fold->second.bias_add >= 0
            ? const_value(graph, graph.node(fold->second.bias_add).inputs[1])->data<float>()
            : nullptr;
    float* nw = new_w.data<float>();
    for (int64_t c = 0; c < channels; ++c) {
      const double scale = gamma[c] / std::sqrt(static_cast<double>(var[c]) + eps);
      for (int64_t i = c; i < new_w.numel(); i += channels)
        nw[i] = static_cast<float>(nw[i] * scale);
      new_b.data<float>()[c] =
          static_cast<float>(((old_b ? old_b[c] : 0.0f) - mean[c]) * scale + beta[c]);
    }
    Graph& t = rw.target();
    Output wc = ops::constant(t, new_w, t.unique_name(linear.name + "/folded_weights"));
    Output bc = ops::constant(t, new_b, t.unique_name(linear.name + "/folded_bias"));
    int lin = t.add_node(linear.op, {rw.map(linear.inputs[0]), wc}, linear.attrs, linear.name);
    Output y = ops::bias_add(t, {lin, 0}, bc, node.name);
    rw.set({node.id, 0}, y);
    return true;
  });
  return rw.finish(outputs);
}

Graph fuse_bias_activation(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  struct Fusion {
    int linear;
    int bias_add;
    const Node* activation;  // null when absent
  };
  std::map<int, Fusion> fusions;  // keyed by the group's last node
  std::map<int, bool> member;
  for (const Node& linear : graph.nodes()) {
    if ((linear.op != op_names::kConv2D && linear.op != op_names::kMatMul) ||
        !uses.needed(linear.id))
      continue;
    const Node* bias = uses.sole_consumer(linear.id);
    if (!bias || bias->op != op_names::kBiasAdd) continue;
    const Node* act = fusable_activation(uses, bias->id);
    fusions[act ? act->id : bias->id] = Fusion{linear.id, bias->id, act};
    member[linear.id] = member[bias->id] = true;
  }
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    auto f = fusions.find(node.id);
    if (f == fusions.end()) return member.count(node.id) > 0;
    const Node& linear = graph.node(f->second.linear);
    const Node& bias = graph.node(f->second.bias_add);
    Attrs attrs = linear.attrs;
    attrs.set("activation", activation_name(fused_activation(f->second.activation)));
    const std::string op =
        linear.op == op_names::kConv2D ? op_names::kFusedConv2D : op_names::kFusedMatMul;
    int id = rw.target().add_node(
        op, {rw.map(linear.inputs[0]), rw.map(linear.inputs[1]), rw.map(bias.inputs[1])}, attrs,
        linear.name);
    rw.set({node.id, 0}, {id, 0});
    return true;
  });
  return rw.finish(outputs);
}

Graph optimize_for_inference(const Graph& graph, const VariableStore& variables,
                             std::vector<Output>& outputs) {
  Graph frozen = freeze_variables(graph, variables, outputs);
  Graph folded = fold_batch_norm(frozen, outputs);
  return fuse_bias_activation(folded, outputs);
}

Graph optimize_constant_graph(const Graph& graph, std::vector<std::string>& output_names) {
  std::vector<Output> outputs;
  for (const std::string& name : output_names) outputs.push_back({graph.id_of(name), 0});
  Graph folded = fold_batch_norm(graph, outputs);
  Graph fused = fuse_bias_activation(folded, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) output_names[i] = fused.node(outputs[i].node).name;
  return fused;
}

}  // namespace sf
