#include "transforms/execution_passes.h"

#include <cstring>
#include <map>

#include "ops/op_names.h"
#include "ops/ops.h"
#include "transforms/graph_uses.h"
#include "transforms/rewriter.h"

namespace sf {

namespace {

// A Concat of 4-D f32 tensors along the last (channel) axis.
bool is_channel_concat(const Node& node) {
  if (node.op != op_names::kConcat || node.outputs[0].shape.size() != 4 ||
      node.outputs[0].dtype != DType::f32)
    return false;
  const int64_t axis = node.attrs.get_int("axis");
  return axis == 3 || axis == -1;
}

// Input channels [begin, end) of an HWIO filter.
Tensor filter_channels(const Tensor& filter, int64_t begin, int64_t end) {
  const int64_t taps = filter.dim(0) * filter.dim(1);
  const int64_t in = filter.dim(2);
  const int64_t out = filter.dim(3);
  Tensor part(DType::f32, {filter.dim(0), filter.dim(1), end - begin, out});
  const float* src = filter.data<float>();
  float* dst = part.data<float>();
  for (int64_t t = 0; t < taps; ++t)
    std::memcpy(dst + t * (end - begin) * out, src + (t * in + begin) * out,
                static_cast<size_t>((end - begin) * out) * sizeof(float));
  return part;
}

// A conv that can read a channel concat's parts one by one: convolution is linear in its input
// channels, and zero padding pads each channel alike, so any kernel size, stride and padding
// splits; groups do not. Each part after the first reads and writes the whole output again
// (the partial sum), which costs more than the concat's copy once the conv has more output
// channels than input channels (SqueezeNet's 512 -> 1000 classifier: 0.54 ms split, 0.50 ms not).
bool splits_over_input_channels(const Graph& graph, const Node& conv, int input_index) {
  if (conv.op != op_names::kFusedConv2D || input_index != 0 || conv.attrs.get_int("groups") != 1)
    return false;
  const Tensor* filter = const_value(graph, conv.inputs[1]);
  return filter != nullptr && filter->dim(3) <= filter->dim(2);
}

// A 1x1 conv. The addend rides on a oneDNN binary post-op, which costs 1x1 convs little but
// pushes 3x3 convs off Winograd and brgconv: ResNet-18's fused 3x3 convs ran 0.1-0.3 ms slower
// each, several times what the separate Add and Relu cost.
bool is_pointwise(const Graph& graph, const Node& conv) {
  const Shape& filter = graph.type(conv.inputs[1]).shape;
  return filter[0] == 1 && filter[1] == 1;
}

}  // namespace

Graph pool_before_concat(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  std::map<int, int> pool_of_concat;
  for (const Node& node : graph.nodes()) {
    if (!uses.needed(node.id) || !is_channel_concat(node)) continue;
    const Node* pool = uses.sole_consumer(node.id);
    if (pool && pool->op == op_names::kMaxPool && pool->outputs.size() == 1)
      pool_of_concat[node.id] = pool->id;
  }
  std::map<int, bool> moved_pools;
  for (const auto& [concat, pool] : pool_of_concat) moved_pools[pool] = true;
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (moved_pools.count(node.id)) return true;
    auto it = pool_of_concat.find(node.id);
    if (it == pool_of_concat.end()) return false;
    const Node& pool = graph.node(it->second);
    Graph& t = rw.target();
    std::vector<Output> pooled;
    for (const Output& part : node.inputs)
      pooled.push_back(t.add(op_names::kMaxPool, {rw.map(part)}, pool.attrs,
                             t.unique_name(pool.name + "/part")));
    rw.set({pool.id, 0}, t.add(op_names::kConcat, pooled, node.attrs, pool.name));
    return true;
  });
  return rw.finish(outputs);
}

Graph split_channel_concat(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  std::map<int, bool> split;
  for (const Node& node : graph.nodes()) {
    if (!uses.needed(node.id) || !is_channel_concat(node) || uses.is_graph_output(node.id) ||
        uses.readers(node.id).empty())
      continue;
    bool all_convs = true;
    for (const auto& [consumer, input] : uses.readers(node.id))
      all_convs = all_convs && splits_over_input_channels(graph, graph.node(consumer), input);
    if (all_convs) split[node.id] = true;
  }
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (split.count(node.id)) return true;
    if (node.op != op_names::kFusedConv2D || !split.count(node.inputs[0].node)) return false;
    const Node& concat = graph.node(node.inputs[0].node);
    const Tensor& filter = *const_value(graph, node.inputs[1]);
    const int64_t out_channels = filter.dim(3);
    Graph& t = rw.target();
    Tensor zeros(DType::f32, {out_channels});
    std::memset(zeros.raw(), 0, static_cast<size_t>(out_channels) * sizeof(float));
    const Output zero_bias = ops::constant(t, zeros, t.unique_name(node.name + "/zero_bias"));
    Output partial_sum;
    int64_t channel = 0;
    for (size_t i = 0; i < concat.inputs.size(); ++i) {
      const bool last = i + 1 == concat.inputs.size();
      const int64_t width = graph.type(concat.inputs[i]).shape[3];
      const Output filter_part = ops::constant(t, filter_channels(filter, channel, channel + width),
                                               t.unique_name(node.name + "/filter_part"));
      channel += width;
      Attrs attrs = node.attrs;
      if (!last) attrs.set("activation", activation_name(Activation::None));
      std::vector<Output> inputs = {rw.map(concat.inputs[i]), filter_part,
                                    last ? rw.map(node.inputs[2]) : zero_bias};
      if (i > 0) inputs.push_back(partial_sum);
      partial_sum = t.add(i == 0 ? op_names::kFusedConv2D : op_names::kFusedConv2DAdd, inputs,
                          attrs, last ? node.name : t.unique_name(node.name + "/part"));
    }
    rw.set({node.id, 0}, partial_sum);
    return true;
  });
  return rw.finish(outputs);
}

Graph fuse_residual_add(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  struct Fusion {
    int conv;
    Output addend;
    const Node* activation;  // null when absent
  };
  std::map<int, Fusion> fusions;  // keyed by the group's last node
  std::map<int, bool> member;
  for (const Node& add : graph.nodes()) {
    if (add.op != op_names::kAdd || !uses.needed(add.id)) continue;
    const Shape& y = add.outputs[0].shape;
    if (graph.type(add.inputs[0]).shape != y || graph.type(add.inputs[1]).shape != y) continue;
    for (int side : {1, 0}) {
      const Node& conv = graph.node(add.inputs[static_cast<size_t>(side)].node);
      if (conv.op != op_names::kFusedConv2D || activation_of(conv) != Activation::None ||
          !is_pointwise(graph, conv) || member.count(conv.id) ||
          uses.sole_consumer(conv.id) != &add)
        continue;
      const Node* act = fusable_activation(uses, add.id);
      fusions[act ? act->id : add.id] =
          Fusion{conv.id, add.inputs[static_cast<size_t>(1 - side)], act};
      member[conv.id] = member[add.id] = true;
      break;
    }
  }
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    auto f = fusions.find(node.id);
    if (f == fusions.end()) return member.count(node.id) > 0;
    const Node& conv = graph.node(f->second.conv);
    Attrs attrs = conv.attrs;
    if (f->second.activation)
      attrs.set("activation", activation_name(fused_activation(f->second.activation)));
    rw.set({node.id, 0}, rw.target().add(op_names::kFusedConv2DAdd,
                                         {rw.map(conv.inputs[0]), rw.map(conv.inputs[1]),
                                          rw.map(conv.inputs[2]), rw.map(f->second.addend)},
                                         attrs, conv.name));
    return true;
  });
  return rw.finish(outputs);
}

Graph optimize_for_execution(const Graph& graph, std::vector<std::string>& output_names) {
  std::vector<Output> outputs;
  for (const std::string& name : output_names) outputs.push_back({graph.id_of(name), 0});
  Graph pooled = pool_before_concat(graph, outputs);
  Graph split = split_channel_concat(pooled, outputs);
  Graph fused = fuse_residual_add(split, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) output_names[i] = fused.node(outputs[i].node).name;
  return fused;
}

}  // namespace sf
