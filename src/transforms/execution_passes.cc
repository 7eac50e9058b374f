#include "transforms/execution_passes.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "codec/binary_weights.h"
#include "ops/binary_ops.h"
#include "ops/execution_ops.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "transforms/graph_uses.h"
#include "transforms/rewriter.h"

namespace sf {

namespace {

// A concat of 4-D tensors along the last (channel) axis: a Concat of f32 tensors, or with
// `quantized` a QuantizedConcat of u8 ones. Each QuantizedConcat part's requantization to the
// output's params is non-decreasing, so a max pool after it equals the concat of the parts'
// max pools, to the byte (no pool window reads padding alone: pool_output rejects such pads).
bool is_channel_concat(const Node& node, bool quantized = false) {
  if (node.op != (quantized ? op_names::kQuantizedConcat : op_names::kConcat) ||
      node.outputs[0].shape.size() != 4 ||
      node.outputs[0].dtype != (quantized ? DType::u8 : DType::f32))
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


// The value of a Const holding exactly one f32.
std::optional<float> scalar_value(const Graph& graph, Output o) {
  const Tensor* t = const_value(graph, o);
  if (t == nullptr || t->dtype() != DType::f32 || t->numel() != 1) return std::nullopt;
  return t->data<float>()[0];
}

bool is_scalar(const Graph& graph, Output o, float value, float tolerance = 0.0f) {
  const std::optional<float> v = scalar_value(graph, o);
  return v && std::fabs(*v - value) <= tolerance;
}

// The node that alone reads output 0 of `id`, when it is a `op` node.
const Node* sole(const GraphUses& uses, int id, const char* op) {
  const Node* next = uses.sole_consumer(id);
  return next != nullptr && next->op == op ? next : nullptr;
}

// The operand of a two-input node besides `known` (output 0 of node `known`); invalid when
// neither or both inputs are it.
Output other_operand(const Node& node, int known) {
  if (node.inputs.size() != 2) return {};
  const bool first = node.inputs[0] == Output{known, 0};
  const bool second = node.inputs[1] == Output{known, 0};
  if (first == second) return {};
  return node.inputs[first ? 1 : 0];
}

// A ReduceMean over the last axis only, keeping it as 1.
bool is_last_axis_mean(const Graph& graph, const Node& node) {
  if (node.op != op_names::kReduceMean || !node.attrs.get_bool("keep_dims")) return false;
  const int64_t rank = static_cast<int64_t>(graph.type(node.inputs[0]).shape.size());
  const std::vector<int64_t> axes = node.attrs.get_ints("axes");
  return rank > 0 && axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

// A per-channel operand of a LayerNorm: shape [C] or [1, ..., 1, C].
bool is_channel_vector(const Graph& graph, Output o, int64_t channels) {
  const TensorType& t = graph.type(o);
  if (t.dtype != DType::f32 || t.shape.empty() || t.shape.back() != channels) return false;
  for (size_t i = 0; i + 1 < t.shape.size(); ++i)
    if (t.shape[i] != 1) return false;
  return true;
}

// A group of nodes that becomes one node: `members` are left out, `last` is replaced by the
// fused node, which `make` adds to the target graph.
struct Fusion {
  int last;
  std::vector<int> members;
  std::function<Output(Rewriter&)> make;
};

Graph apply_fusions(const Graph& graph, const GraphUses& uses, std::map<int, Fusion>& by_last,
                    std::vector<Output>& outputs) {
  std::map<int, bool> member;
  for (const auto& [last, fusion] : by_last)
    for (int id : fusion.members) member[id] = true;
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    auto f = by_last.find(node.id);
    if (f != by_last.end()) {
      rw.set({node.id, 0}, f->second.make(rw));
      return true;
    }
    return member.count(node.id) > 0;
  });
  return rw.finish(outputs);
}

// The decomposed LayerNormalization starting at `mean` (ReduceMean of x over the last axis),
// as PyTorch exports it (Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta) or
// as the ONNX importer writes the LayerNormalization op (Mul of the centered values by
// themselves, Div 1 by the root, Mul). Every intermediate must be read by the group alone.
std::optional<Fusion> match_layer_norm(const Graph& graph, const GraphUses& uses,
                                       const Node& mean) {
  if (!is_last_axis_mean(graph, mean) || graph.type({mean.id, 0}).dtype != DType::f32)
    return std::nullopt;
  const Output x = mean.inputs[0];
  const TensorType& x_type = graph.type(x);
  const int64_t channels = x_type.shape.back();
  const Node* centered = sole(uses, mean.id, op_names::kSub);
  if (!centered || centered->inputs[0] != x || centered->inputs[1] != Output{mean.id, 0} ||
      uses.is_graph_output(centered->id))
    return std::nullopt;
  // The centered values feed the square and the division, nothing else.
  const Output d{centered->id, 0};
  const Node* square = nullptr;
  const Node* divide = nullptr;
  for (const auto& [reader, input] : uses.readers(centered->id)) {
    const Node& r = graph.node(reader);
    if (r.inputs[static_cast<size_t>(input)].index != 0) return std::nullopt;
    const bool pow2 =
        r.op == op_names::kPow && r.inputs[0] == d && is_scalar(graph, r.inputs[1], 2.0f);
    const bool self_product = r.op == op_names::kMul && r.inputs[0] == d && r.inputs[1] == d;
    if (pow2 || self_product) {
      if (square && square != &r) return std::nullopt;
      square = &r;
    } else {
      if (divide && divide != &r) return std::nullopt;
      divide = &r;
    }
  }
  if (!square || !divide) return std::nullopt;
  const Node* var = sole(uses, square->id, op_names::kReduceMean);
  if (!var || !is_last_axis_mean(graph, *var)) return std::nullopt;
  const Node* var_eps = sole(uses, var->id, op_names::kAdd);
  if (!var_eps) return std::nullopt;
  const std::optional<float> eps = scalar_value(graph, other_operand(*var_eps, var->id));
  if (!eps || !(*eps >= 0)) return std::nullopt;
  const Node* root = sole(uses, var_eps->id, op_names::kSqrt);
  if (!root) return std::nullopt;
  std::vector<int> members{mean.id, centered->id, square->id, var->id, var_eps->id, root->id};
  // d / root, or d * (1 / root).
  if (divide->op == op_names::kDiv) {
    if (divide->inputs[0] != d || divide->inputs[1] != Output{root->id, 0} ||
        uses.sole_consumer(root->id) != divide)
      return std::nullopt;
  } else {
    const Node* inverse = sole(uses, root->id, op_names::kDiv);
    if (!inverse || !is_scalar(graph, inverse->inputs[0], 1.0f) ||
        inverse->inputs[1] != Output{root->id, 0} || divide->op != op_names::kMul ||
        other_operand(*divide, centered->id) != Output{inverse->id, 0} ||
        uses.sole_consumer(inverse->id) != divide)
      return std::nullopt;
    members.push_back(inverse->id);
  }
  members.push_back(divide->id);
  const Node* last = divide;
  Output gamma, beta;
  if (const Node* scale = sole(uses, last->id, op_names::kMul)) {
    const Output g = other_operand(*scale, last->id);
    if (g.valid() && is_channel_vector(graph, g, channels) &&
        graph.type({scale->id, 0}) == x_type) {
      gamma = g;
      last = scale;
      members.push_back(scale->id);
    }
  }
  if (const Node* shift = sole(uses, last->id, op_names::kAdd)) {
    const Output b = other_operand(*shift, last->id);
    if (b.valid() && is_channel_vector(graph, b, channels) &&
        graph.type({shift->id, 0}) == x_type) {
      beta = b;
      last = shift;
      members.push_back(shift->id);
    }
  }
  if (graph.type({last->id, 0}) != x_type) return std::nullopt;
  members.pop_back();  // the last node is replaced, not left out
  const std::string name = last->name;
  const double epsilon = *eps;
  return Fusion{last->id, members,
                [&graph, x, gamma, beta, channels, epsilon, name](Rewriter& rw) {
                  Graph& t = rw.target();
                  const auto per_channel = [&](Output o, float fill, const char* what) {
                    if (!o.valid()) {
                      Tensor v(DType::f32, {channels});
                      std::fill_n(v.data<float>(), channels, fill);
                      return ops::constant(t, v, t.unique_name(name + "/" + what));
                    }
                    if (graph.type(o).shape == Shape{channels}) return rw.map(o);
                    return ops::reshape(t, rw.map(o), {channels},
                                        t.unique_name(name + "/" + what));
                  };
                  const Output g = per_channel(gamma, 1.0f, "gamma");
                  const Output b = per_channel(beta, 0.0f, "beta");
                  return ops::layer_norm(t, rw.map(x), g, b, epsilon, name);
                }};
}

// The erf GELU starting at `erf`: x * 0.5 * (1 + erf(x / sqrt 2)) with the products in any
// order (PyTorch: Mul(Mul(x, 1 + erf), 0.5)); x / sqrt 2 as a Div or a Mul by 1 / sqrt 2.
std::optional<Fusion> match_gelu(const Graph& graph, const GraphUses& uses, const Node& erf) {
  const Node& scaled = graph.node(erf.inputs[0].node);
  if (erf.inputs[0].index != 0 || uses.sole_consumer(scaled.id) != &erf) return std::nullopt;
  Output x;
  if (scaled.op == op_names::kDiv && is_scalar(graph, scaled.inputs[1], 1.41421356f, 1e-6f)) {
    x = scaled.inputs[0];
  } else if (scaled.op == op_names::kMul) {
    for (int side : {0, 1})
      if (is_scalar(graph, scaled.inputs[static_cast<size_t>(side)], 0.70710678f, 1e-6f))
        x = scaled.inputs[static_cast<size_t>(1 - side)];
  }
  if (!x.valid() || graph.type(x).dtype != DType::f32) return std::nullopt;
  const Node* plus_one = sole(uses, erf.id, op_names::kAdd);
  if (!plus_one || !is_scalar(graph, other_operand(*plus_one, erf.id), 1.0f)) return std::nullopt;
  const Node* product = sole(uses, plus_one->id, op_names::kMul);
  if (!product) return std::nullopt;
  std::vector<int> members{scaled.id, erf.id, plus_one->id};
  const Node* last = nullptr;
  const Output other = other_operand(*product, plus_one->id);
  const auto times = [&](const Node* n, int known, const std::function<bool(Output)>& want) {
    return n && want(other_operand(*n, known)) ? n : nullptr;
  };
  const auto is_x = [&](Output o) { return o == x; };
  const auto is_half = [&](Output o) { return is_scalar(graph, o, 0.5f); };
  if (other == x) {  // (x * (1 + erf)) * 0.5
    last = times(sole(uses, product->id, op_names::kMul), product->id, is_half);
    members.push_back(product->id);
  } else if (is_half(other)) {  // ((1 + erf) * 0.5) * x
    last = times(sole(uses, product->id, op_names::kMul), product->id, is_x);
    members.push_back(product->id);
  } else if (other.valid() && other.index == 0) {  // (x * 0.5) * (1 + erf)
    const Node& half_x = graph.node(other.node);
    if (half_x.op == op_names::kMul && uses.sole_consumer(half_x.id) == product &&
        ((half_x.inputs[0] == x && is_half(half_x.inputs[1])) ||
         (half_x.inputs[1] == x && is_half(half_x.inputs[0])))) {
      last = product;
      members.push_back(half_x.id);
    }
  }
  if (!last || graph.type({last->id, 0}) != graph.type(x)) return std::nullopt;
  const std::string name = last->name;
  return Fusion{last->id, members,
                [=](Rewriter& rw) { return ops::gelu(rw.target(), rw.map(x), name); }};
}

}  // namespace

namespace {

// A Transpose read as a product's operand that the operand's transpose flag can stand for in
// part: one that brings the stored last axis to the second-to-last place. With the last two
// entries of its perm swapped it moves whole rows (the last axis stays; a true 2-D transpose of
// a [32,128,64] attention key costs 3 times as much), or nothing: the identity.
bool folds_into_flag(const Node& node) {
  if (node.op != op_names::kTranspose) return false;
  const std::vector<int64_t> perm = node.attrs.get_ints("perm");
  const int64_t rank = static_cast<int64_t>(node.outputs[0].shape.size());
  return rank >= 2 && static_cast<int64_t>(perm.size()) == rank &&
         perm[static_cast<size_t>(rank - 2)] == rank - 1;
}

// The perm of what is left of a folded Transpose once the flag swaps the last two axes.
std::vector<int64_t> perm_left(const Node& transpose) {
  std::vector<int64_t> perm = transpose.attrs.get_ints("perm");
  std::swap(perm[perm.size() - 2], perm[perm.size() - 1]);
  return perm;
}

// What a Mul or Div by a constant scalar does to its other operand (`x`, set here): scale it.
std::optional<float> scalar_factor(const Graph& graph, const Node& node, Output& x) {
  if (node.inputs.size() != 2) return std::nullopt;
  for (int side : {1, 0}) {
    if (side == 0 && node.op != op_names::kMul) break;
    const std::optional<float> c = scalar_value(graph, node.inputs[static_cast<size_t>(side)]);
    x = node.inputs[static_cast<size_t>(1 - side)];
    if (!c || graph.type(x) != node.outputs[0]) continue;
    if (node.op == op_names::kMul) return *c;
    if (node.op == op_names::kDiv && *c != 0.0f) return 1.0f / *c;
  }
  return std::nullopt;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

Graph fuse_batch_matmul(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  // Transposes read only as products' operands: the products read the rest of the Transpose
  // (or its input) with the operand's transpose flag flipped.
  std::set<int> folded;
  for (const Node& node : graph.nodes()) {
    if (!uses.needed(node.id) || !folds_into_flag(node) || uses.is_graph_output(node.id) ||
        uses.readers(node.id).empty())
      continue;
    bool only_products = true;
    for (const auto& [reader, input] : uses.readers(node.id))
      only_products = only_products && graph.node(reader).op == op_names::kBatchMatMul && input < 2;
    if (only_products) folded.insert(node.id);
  }
  // Adds of a bias [N] (or [1, ..., 1, N]) to a product read by nothing else, keyed by the Add.
  struct BiasAdd {
    int product;
    Output bias;
  };
  std::map<int, BiasAdd> bias_adds;
  std::set<int> absorbed;
  for (const Node& add : graph.nodes()) {
    if (add.op != op_names::kAdd || !uses.needed(add.id) || add.inputs.size() != 2) continue;
    for (int side : {0, 1}) {
      const Output product = add.inputs[static_cast<size_t>(side)];
      const Output bias = add.inputs[static_cast<size_t>(1 - side)];
      const Node& matmul = graph.node(product.node);
      const TensorType& y = matmul.outputs[0];
      if (matmul.op != op_names::kBatchMatMul || uses.sole_consumer(matmul.id) != &add ||
          !is_channel_vector(graph, bias, y.shape.back()) ||
          graph.type(bias).shape.size() > y.shape.size() || add.outputs[0] != y)
        continue;
      bias_adds[add.id] = BiasAdd{matmul.id, bias};
      absorbed.insert(matmul.id);
      break;
    }
  }
  // Operands scaled by a constant (attention's q / sqrt(d)) read only by a product without a
  // bias: the product scales its output instead, keyed by the Mul or Div, with the factor.
  std::map<int, float> scales;
  for (const Node& node : graph.nodes()) {
    Output x;
    const std::optional<float> factor = node.op == op_names::kMul || node.op == op_names::kDiv
                                            ? scalar_factor(graph, node, x)
                                            : std::nullopt;
    const Node* product = factor ? sole(uses, node.id, op_names::kBatchMatMul) : nullptr;
    if (!uses.needed(node.id) || !product || absorbed.count(product->id)) continue;
    scales[node.id] = *factor;
  }
  if (folded.empty() && bias_adds.empty() && scales.empty()) return graph;
  Rewriter rw(graph);
  // A product's attributes, its transpose flags flipped where it reads a folded Transpose.
  const auto product_attrs = [&](const Node& matmul) {
    Attrs attrs = matmul.attrs;
    for (const auto& [input, flag] : {std::pair{0, "transpose_a"}, std::pair{1, "transpose_b"}})
      if (folded.count(matmul.inputs[static_cast<size_t>(input)].node))
        attrs.set(flag, !matmul.attrs.get_bool(flag));
    return attrs;
  };
  rw.copy_needed(uses, [&](const Node& node) {
    Graph& t = rw.target();
    if (folded.count(node.id)) {
      const std::vector<int64_t> perm = perm_left(node);
      const Output x = rw.map(node.inputs[0]);
      rw.set({node.id, 0}, is_identity(perm) ? x : ops::transpose(t, x, perm, node.name));
      return true;
    }
    if (absorbed.count(node.id) || scales.count(node.id)) return true;
    if (auto f = bias_adds.find(node.id); f != bias_adds.end()) {
      const Node& matmul = graph.node(f->second.product);
      const int64_t n = matmul.outputs[0].shape.back();
      Output bias = rw.map(f->second.bias);
      if (graph.type(f->second.bias).shape != Shape{n})
        bias = ops::reshape(t, bias, {n}, t.unique_name(node.name + "/bias"));
      rw.set({node.id, 0}, t.add(op_names::kFusedBatchMatMul,
                                 {rw.map(matmul.inputs[0]), rw.map(matmul.inputs[1]), bias},
                                 product_attrs(matmul), node.name));
      return true;
    }
    const auto rewritten = [&](Output o) { return folded.count(o.node) || scales.count(o.node); };
    if (node.op != op_names::kBatchMatMul ||
        (!rewritten(node.inputs[0]) && !rewritten(node.inputs[1])))
      return false;
    float alpha = 1.0f;
    std::vector<Output> inputs;
    for (const Output& o : node.inputs) {
      auto scale = scales.find(o.node);
      if (scale == scales.end()) {
        inputs.push_back(rw.map(o));
        continue;
      }
      Output x;
      scalar_factor(graph, graph.node(o.node), x);
      inputs.push_back(rw.map(x));
      alpha *= scale->second;
    }
    Attrs attrs = product_attrs(node);
    if (alpha == 1.0f) {
      rw.set({node.id, 0}, t.add(op_names::kBatchMatMul, inputs, attrs, node.name));
      return true;
    }
    const int64_t n = node.outputs[0].shape.back();
    Tensor zeros(DType::f32, {n});
    std::fill_n(zeros.data<float>(), n, 0.0f);
    inputs.push_back(ops::constant(t, zeros, t.unique_name(node.name + "/zero_bias")));
    attrs.set("alpha", static_cast<double>(alpha));
    rw.set({node.id, 0}, t.add(op_names::kFusedBatchMatMul, inputs, attrs, node.name));
    return true;
  });
  return rw.finish(outputs);
}

// The data inputs of a concat: all of a Concat's, every other one of a QuantizedConcat's
// (data, params, ..., out_params).
std::vector<size_t> concat_data_inputs(const Node& concat) {
  std::vector<size_t> data;
  const bool quantized = concat.op == op_names::kQuantizedConcat;
  const size_t parts = quantized ? (concat.inputs.size() - 1) / 2 : concat.inputs.size();
  for (size_t i = 0; i < parts; ++i) data.push_back(quantized ? 2 * i : i);
  return data;
}

Graph pool_before_concat(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  std::map<int, int> pool_of_concat;
  for (const Node& node : graph.nodes()) {
    if (!uses.needed(node.id) || !(is_channel_concat(node) || is_channel_concat(node, true)))
      continue;
    const char* pool_op =
        node.op == op_names::kConcat ? op_names::kMaxPool : op_names::kQuantizedMaxPool;
    const Node* pool = uses.sole_consumer(node.id);
    if (pool && pool->op == pool_op && pool->outputs.size() == 1)
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
    std::vector<Output> inputs;
    for (const Output& input : node.inputs) inputs.push_back(rw.map(input));
    for (size_t part : concat_data_inputs(node))
      inputs[part] =
          t.add(pool.op, {inputs[part]}, pool.attrs, t.unique_name(pool.name + "/part"));
    rw.set({pool.id, 0}, t.add(node.op, inputs, node.attrs, pool.name));
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
    // A spec's `add` layer freezes to an AddN, which with two operands is the same sum.
    const bool sums_two = add.op == op_names::kAdd ||
                          (add.op == op_names::kAddN && add.inputs.size() == 2);
    if (!sums_two || !uses.needed(add.id)) continue;
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

namespace {

// An f32 Add of two tensors of its output's shape, or an AddN: what FusedAddN computes.
bool is_elementwise_sum(const Graph& graph, const Node& node) {
  if (node.op == op_names::kAddN) return node.outputs[0].dtype == DType::f32;
  if (node.op != op_names::kAdd || node.outputs[0].dtype != DType::f32) return false;
  const Shape& y = node.outputs[0].shape;
  return graph.type(node.inputs[0]).shape == y && graph.type(node.inputs[1]).shape == y;
}

}  // namespace

Graph fuse_add_activation(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  std::map<int, const Node*> sum_before;  // keyed by the activation
  std::map<int, bool> sums;               // each sum: whether its activation's FusedAddN sums it
  for (const Node& node : graph.nodes()) {
    if (!uses.needed(node.id) || !is_elementwise_sum(graph, node)) continue;
    const Node* act = fusable_activation(uses, node.id);
    sums[node.id] = act != nullptr;
    if (act) sum_before[act->id] = &node;
  }
  if (sums.empty()) return graph;
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    // Copies of the sum under another op keep its name and device.
    if (auto s = sum_before.find(node.id); s != sum_before.end()) {
      Node fused = *s->second;
      fused.op = op_names::kFusedAddN;
      fused.attrs = Attrs{};
      fused.attrs.set("activation", activation_name(fused_activation(&node)));
      rw.copy(fused, rw.mapped(fused.inputs));
      rw.set({node.id, 0}, rw.map({fused.id, 0}));
      return true;
    }
    auto sum = sums.find(node.id);
    if (sum == sums.end()) return false;
    if (sum->second) return true;
    Node add_n = node;
    add_n.op = op_names::kAddN;
    add_n.attrs = Attrs{};
    rw.copy(add_n, rw.mapped(add_n.inputs));
    return true;
  });
  return rw.finish(outputs);
}

Graph fuse_layer_norm(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  std::map<int, Fusion> fusions;
  for (const Node& node : graph.nodes()) {
    if (!uses.needed(node.id) || node.op != op_names::kReduceMean) continue;
    if (std::optional<Fusion> f = match_layer_norm(graph, uses, node)) fusions[f->last] = *f;
  }
  return apply_fusions(graph, uses, fusions, outputs);
}

Graph fuse_gelu(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  std::map<int, Fusion> fusions;
  for (const Node& node : graph.nodes()) {
    if (!uses.needed(node.id) || node.op != op_names::kErf) continue;
    if (std::optional<Fusion> f = match_gelu(graph, uses, node)) fusions[f->last] = *f;
  }
  return apply_fusions(graph, uses, fusions, outputs);
}

namespace {

// A reader of a BinarizeActivation that an XNOR node can replace: input 0 of a conv or matmul
// whose weights are a Const of binary or ternary levels (which the binary kernels pack).
enum class XnorReader { none, conv, matmul };

XnorReader xnor_reader(const Graph& graph, const Node& node, int input_index) {
  if (input_index != 0) return XnorReader::none;
  XnorReader kind = XnorReader::none;
  if ((node.op == op_names::kConv2D || node.op == op_names::kFusedConv2D) &&
      node.attrs.get_int("groups") == 1)
    kind = XnorReader::conv;
  else if ((node.op == op_names::kMatMul || node.op == op_names::kFusedMatMul) &&
           !node.attrs.get_bool("transpose_a") && !node.attrs.get_bool("transpose_b"))
    kind = XnorReader::matmul;
  // Only a conv's or matmul's input 1 is weights; other readers may have no second input.
  if (kind == XnorReader::none || node.inputs.size() < 2) return XnorReader::none;
  const Tensor* w = const_value(graph, node.inputs[1]);
  if (w == nullptr || w->dtype() != DType::f32 || !quant::signed_levels(*w)) return XnorReader::none;
  return kind;
}

// What writes a BinarizeActivation's bits: the MaxPool before it (through a flatten when its
// channels fill whole 32-bit elements, so that the pooled pixels' bits are the flat rows' bits),
// else a SignBits of its input.
struct BitsSource {
  const Node* pool = nullptr;
  const Node* flatten = nullptr;
};

BitsSource bits_source(const Graph& graph, const GraphUses& uses, const Node& binarize, XnorReader kind) {
  const Node* p = &graph.node(binarize.inputs[0].node);
  const Node* flatten = nullptr;
  if (kind == XnorReader::matmul && (p->op == op_names::kFlatten || p->op == op_names::kReshape) &&
      uses.sole_consumer(p->id) == &binarize) {
    const Node& before = graph.node(p->inputs[0].node);
    const Shape& pooled = before.outputs[0].shape;
    if (pooled.size() != 4 || pooled[3] % 32 != 0 ||
        p->outputs[0].shape != Shape{pooled[0], pooled[1] * pooled[2] * pooled[3]})
      return {};
    flatten = p;
    p = &before;
  }
  if (p->op != op_names::kMaxPool || p->outputs[0].dtype != DType::f32 ||
      uses.sole_consumer(p->id) != (flatten ? flatten : &binarize) || uses.side_outputs_used(*p))
    return {};
  return {p, flatten};
}

}  // namespace

Graph pack_binary_activations(const Graph& graph, std::vector<Output>& outputs) {
  const GraphUses uses(graph, outputs);
  std::map<int, BitsSource> packings;    // keyed by the BinarizeActivation
  std::map<int, XnorReader> readers;     // the convs and matmuls that read bits instead
  std::set<int> absorbed;                // pools and flattens whose work the bits node does
  for (const Node& node : graph.nodes()) {
    if (node.op != op_names::kBinarizeActivation || !uses.needed(node.id) ||
        uses.is_graph_output(node.id) || uses.readers(node.id).empty())
      continue;
    XnorReader kind = XnorReader::none;
    for (const auto& [reader, index] : uses.readers(node.id)) {
      const XnorReader k = xnor_reader(graph, graph.node(reader), index);
      if (k == XnorReader::none || (kind != XnorReader::none && k != kind)) {
        kind = XnorReader::none;
        break;
      }
      kind = k;
    }
    if (kind == XnorReader::none) continue;
    const BitsSource source = bits_source(graph, uses, node, kind);
    packings[node.id] = source;
    if (source.pool) absorbed.insert(source.pool->id);
    if (source.flatten) absorbed.insert(source.flatten->id);
    for (const auto& [reader, index] : uses.readers(node.id)) readers[reader] = kind;
  }
  if (packings.empty()) return graph;
  Rewriter rw(graph);
  rw.copy_needed(uses, [&](const Node& node) {
    if (absorbed.count(node.id)) return true;  // read by nothing else
    Graph& t = rw.target();
    if (auto p = packings.find(node.id); p != packings.end()) {
      const Node* pool = p->second.pool;
      rw.set({node.id, 0}, pool ? t.add(op_names::kMaxPoolSignBits, {rw.map(pool->inputs[0])}, pool->attrs, pool->name)
                                : t.add(op_names::kSignBits, {rw.map(node.inputs[0])}, {}, node.name));
      return true;
    }
    auto r = readers.find(node.id);
    if (r == readers.end()) return false;
    Output bias;
    if (node.inputs.size() > 2) {
      bias = rw.map(node.inputs[2]);
    } else {
      const int64_t channels = node.outputs[0].shape.back();
      Tensor zeros(DType::f32, {channels});
      std::memset(zeros.raw(), 0, static_cast<size_t>(channels) * sizeof(float));
      bias = ops::constant(t, zeros, t.unique_name(node.name + "/zero_bias"));
    }
    Attrs attrs;
    if (r->second == XnorReader::conv) attrs = node.attrs;
    if (node.attrs.has("activation")) attrs.set("activation", node.attrs.get_string("activation"));
    rw.set({node.id, 0}, t.add(r->second == XnorReader::conv ? op_names::kXnorConv2D : op_names::kXnorMatMul,
                               {rw.map(node.inputs[0]), rw.map(node.inputs[1]), bias}, attrs, node.name));
    return true;
  });
  return rw.finish(outputs);
}

Graph optimize_for_execution(const Graph& graph, std::vector<std::string>& output_names) {
  std::vector<Output> outputs;
  for (const std::string& name : output_names) outputs.push_back({graph.id_of(name), 0});
  Graph normalized = fuse_layer_norm(graph, outputs);
  Graph activated = fuse_gelu(normalized, outputs);
  Graph products = fuse_batch_matmul(activated, outputs);
  Graph pooled = pool_before_concat(products, outputs);
  Graph split = split_channel_concat(pooled, outputs);
  Graph residual = fuse_residual_add(split, outputs);
  Graph summed = fuse_add_activation(residual, outputs);
  Graph fused = pack_binary_activations(summed, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) output_names[i] = fused.node(outputs[i].node).name;
  return fused;
}

}  // namespace sf
