#include "quantize/eightbit_rewrite.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "codec/binary_weights.h"
#include "codec/quant_params.h"
#include "core/error.h"
#include "graph/op_registry.h"
#include "ops/op_names.h"
#include "ops/ops.h"
#include "ops/quantized_ops.h"
#include "quantize/learned_ranges.h"
#include "transforms/graph_uses.h"
#include "transforms/rewriter.h"

namespace sf {

SymmetricWeights quantize_weights_symmetric(const Tensor& w, bool per_channel) {
  SF_CHECK(w.dtype() == DType::f32 && w.rank() >= 1, "weights {} {}", dtype_name(w.dtype()),
           shape_str(w.shape()));
  const int64_t channels = per_channel ? w.dim(-1) : 1;
  const int64_t inner = w.dim(-1);
  const float* src = w.data<float>();
  std::vector<float> max_abs(static_cast<size_t>(channels), 0.0f);
  for (int64_t i = 0; i < w.numel(); ++i) {
    float& m = max_abs[static_cast<size_t>(per_channel ? i % inner : 0)];
    m = std::max(m, std::fabs(src[i]));
  }
  SymmetricWeights out{Tensor(DType::i8, w.shape()), Tensor(DType::f32, {channels})};
  float* scales = out.scales.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    const float m = max_abs[static_cast<size_t>(c)];
    // A zero scale would divide by zero in the kernels' bias and requantization arithmetic.
    scales[c] = m > 0.0f && std::isfinite(m) ? m / 127.0f : 1.0f;
  }
  int8_t* q = out.values.data<int8_t>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double v = std::round(static_cast<double>(src[i]) / scales[per_channel ? i % inner : 0]);
    q[i] = static_cast<int8_t>(std::isnan(v) ? 0.0 : std::clamp(v, -127.0, 127.0));
  }
  return out;
}

Tensor params_for_range(const TensorRange& range) {
  const QuantParams p = choose_quant_params(range.min, range.max);
  return Tensor::from_vector<float>({2}, {p.scale, static_cast<float>(p.zero_point)});
}

namespace {

// A tensor's 8-bit form: u8 data and its [scale, zero_point].
struct U8Form {
  Output data;
  Output params;
};

// Ops that only move elements, so a u8 tensor keeps its params through them.
bool moves_elements_only(const std::string& op) {
  return op == op_names::kReshape || op == op_names::kFlatten || op == op_names::kIdentity ||
         op == op_names::kTranspose || op == op_names::kStridedSlice;
}

// The attributes of `source` that `op` declares (the rest take their defaults).
Attrs attrs_for(const std::string& op, const Node& source) {
  Attrs attrs;
  for (const AttrSpec& spec : OpRegistry::global().get(op, "eightbit rewrite").attrs)
    if (source.attrs.has(spec.name) && spec.name.rfind("transpose_", 0) != 0)
      attrs.set(spec.name, source.attrs.all().at(spec.name));
  return attrs;
}

Tensor transposed_2d(const Tensor& m) {
  const int64_t rows = m.dim(0), cols = m.dim(1);
  Tensor t(DType::f32, {cols, rows});
  const float* src = m.data<float>();
  float* dst = t.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  return t;
}

class EightbitRewriter {
 public:
  // `wanted`: when set, every range lookup is recorded there and answered with a stand-in, so
  // the rewrite takes its calibrated paths and names everything a calibration must measure.
  EightbitRewriter(const Graph& source, const EightbitOptions& options,
                   std::vector<std::string>* wanted)
      : src_(source),
        options_(options),
        wanted_(wanted),
        outputs_(checked_outputs(source, options)),
        uses_(source, outputs_, placeholders(source)),
        rw_(source),
        out_(rw_.target()) {}

  EightbitGraph run() {
    for (const Node& node : src_.nodes()) {
      if (!uses_.needed(node.id) || absorbed_.count(node.id)) continue;
      if (node.op == op_names::kConst) continue;  // copied or quantized when a consumer asks
      if (options_.exclude.count(node.name)) {
        copy_float(node);
        stays_float(node, "excluded");
      } else if (!rewrite(node)) {
        copy_float(node);
        if (node.op != op_names::kPlaceholder && !node.outputs.empty() &&
            node.outputs[0].dtype == DType::f32)
          stays_float(node, why_float_.empty() ? "no integer kernel" : why_float_);
      }
      why_float_.clear();
    }
    EightbitGraph result;
    for (const Output& output : outputs_) {
      const Output out = float_of(output);
      result.outputs.push_back(out_.node(out.node).name);
    }
    result.graph = std::move(out_);
    result.layers = std::move(layers_);
    result.float_nodes = std::move(float_nodes_);
    return result;
  }

 private:
  // Checks that the excluded nodes exist; returns the named outputs, or else the nodes nothing
  // reads (other than constants and inputs).
  static std::vector<Output> checked_outputs(const Graph& source, const EightbitOptions& options) {
    for (const std::string& name : options.exclude)
      if (source.find(name) < 0) fail("eightbit: exclude: the graph has no node named '{}'", name);
    std::vector<Output> outputs;
    if (!options.outputs.empty()) {
      for (const std::string& name : options.outputs) {
        const int id = source.find(name);
        if (id < 0) fail("eightbit: the graph has no output node named '{}'", name);
        outputs.push_back({id, 0});
      }
      return outputs;
    }
    const GraphUses all = GraphUses::of_all_nodes(source);
    for (const Node& node : source.nodes())
      if (all.uses(node.id) == 0 && node.op != op_names::kConst &&
          node.op != op_names::kPlaceholder)
        outputs.push_back({node.id, 0});
    return outputs;
  }

  // Inputs stay even when unused, so that a model's list of inputs still holds.
  static std::vector<int> placeholders(const Graph& source) {
    std::vector<int> ids;
    for (const Node& node : source.nodes())
      if (node.op == op_names::kPlaceholder) ids.push_back(node.id);
    return ids;
  }

  // A name no source node has and the new graph does not use yet.
  std::string fresh(const std::string& base) const {
    std::string name = base;
    for (int k = 1; src_.find(name) >= 0 || out_.find(name) >= 0; ++k)
      name = base + "_" + std::to_string(k);
    return name;
  }

  std::optional<TensorRange> range_of(const std::string& tensor) {
    if (wanted_) {
      if (std::find(wanted_->begin(), wanted_->end(), tensor) == wanted_->end())
        wanted_->push_back(tensor);
      return TensorRange{0.0f, 1.0f};
    }
    if (!options_.ranges) return std::nullopt;
    auto it = options_.ranges->find(tensor);
    if (it == options_.ranges->end()) return std::nullopt;
    return it->second;
  }

  // The range a conv or matmul requantizes its output to: its own, or, where a Concat alone
  // reads it, the concat's, as TF Lite's int8 spec has it. The concat then copies bytes instead
  // of requantizing each element (a quarter of squeezenet-mnist's int8 time at batch 1), and
  // the values are rounded once instead of twice.
  std::optional<TensorRange> requantized_range(const Node& node) {
    const Node* reader = uses_.sole_consumer(node.id);
    if (reader != nullptr && reader->op == op_names::kConcat &&
        options_.exclude.count(reader->name) == 0)
      if (std::optional<TensorRange> range = range_of(reader->name)) return range;
    return range_of(node.name);
  }

  bool is_f32(Output o) const { return src_.type(o).dtype == DType::f32; }
  bool is_f32_rank(Output o, size_t rank) const {
    return is_f32(o) && src_.type(o).shape.size() == rank;
  }

  // The source tensor's float form in the new graph, made on first use.
  Output float_of(Output s) {
    if (std::optional<Output> held = rw_.find(s)) return *held;
    const Node& node = src_.node(s.node);
    Output made;
    if (node.op == op_names::kConst) {
      made = ops::constant(out_, node.attrs.get_tensor("value"), node.name);
      out_.mutable_node(made.node).device = node.device;
    } else {
      auto q = u8_.find(s);
      SF_CHECK(q != u8_.end(), "eightbit: tensor '{}':{} has no form", node.name, s.index);
      // A graph output keeps its name, so callers that fetch it by name are unaffected.
      const std::string name = uses_.is_graph_output(s.node) && s.index == 0
                                   ? node.name
                                   : fresh(node.name + "/dequantize");
      made = ops::dequantize(out_, q->second.data, q->second.params, name);
    }
    rw_.set(s, made);
    return made;
  }

  // The source tensor's u8 form in the new graph, made on first use.
  U8Form u8_of(Output s) {
    if (auto it = u8_.find(s); it != u8_.end()) return it->second;
    const Node& node = src_.node(s.node);
    const std::string base = s.index == 0 ? node.name : node.name + "_" + std::to_string(s.index);
    U8Form made;
    if (const Tensor* value = const_value(src_, s)) {
      // A constant is quantized now, over its exact range.
      TensorRange range;
      const float* v = value->data<float>();
      for (int64_t i = 0; i < value->numel(); ++i) {
        range.min = std::min(range.min, v[i]);
        range.max = std::max(range.max, v[i]);
      }
      const QuantParams p = choose_quant_params(range.min, range.max);
      Tensor q(DType::u8, value->shape());
      for (int64_t i = 0; i < value->numel(); ++i) q.data<uint8_t>()[i] = quantize_value(v[i], p);
      made.params = ops::constant(out_, params_for_range(range), fresh(base + "/quantize_params"));
      made.data = ops::constant(out_, q, fresh(base + "/quantized"));
    } else {
      const Output f = float_of(s);
      std::optional<TensorRange> range = s.index == 0 ? range_of(node.name) : std::nullopt;
      made.params =
          range ? ops::constant(out_, params_for_range(*range), fresh(base + "/quantize_params"))
                : ops::choose_qparams(out_, f, fresh(base + "/quantize_params"));
      made.data = ops::quantize(out_, f, made.params, fresh(base + "/quantize"));
    }
    u8_[s] = made;
    return made;
  }

  void copy_float(const Node& node) {
    std::vector<Output> inputs;
    for (const Output& in : node.inputs) inputs.push_back(float_of(in));
    rw_.copy(node, inputs);
  }

  void stays_float(const Node& node, const std::string& reason) {
    float_nodes_.push_back(FloatNode{node.name, node.op, reason});
  }

  // false, saying why `node` stays float.
  bool not_rewritten(std::string reason) {
    why_float_ = std::move(reason);
    return false;
  }

  void produced(const Node& node, const std::string& tensor, Output tensor_output,
                const std::string& quantized_op, U8Form form) {
    u8_[tensor_output] = form;
    layers_.push_back(
        EightbitLayer{node.name, node.op, tensor, quantized_op, form.data, form.params});
  }

  // Emits the integer form of `node`; false when it has none (it then stays float).
  bool rewrite(const Node& node) {
    if (node.outputs.empty() || node.outputs[0].dtype != DType::f32) return false;
    const std::string& op = node.op;
    if (op == op_names::kFusedConv2D || op == op_names::kConv2D) return rewrite_linear(node, true);
    if (op == op_names::kFusedMatMul || op == op_names::kMatMul || op == op_names::kBatchMatMul)
      return rewrite_linear(node, false);
    if (op == op_names::kMaxPool || op == op_names::kAvgPool) return rewrite_pool(node);
    if (op == op_names::kGlobalAvgPool) return rewrite_global_avg_pool(node);
    // A spec's `add` layer freezes to an AddN of two.
    if (op == op_names::kAdd || (op == op_names::kAddN && node.inputs.size() == 2))
      return rewrite_add(node);
    if (op == op_names::kConcat) return rewrite_concat(node);
    if (moves_elements_only(op)) return pass_u8_through(node);
    return false;
  }

  // A BatchMatMul of activations [..., M, K] by constant weights [K, N] (a dense layer on a
  // sequence, as ONNX exporters write it) runs as the 2-D product on its rows, between u8
  // reshapes.
  bool rewrite_linear(const Node& node, bool conv) {
    const bool fused = node.op.rfind("Fused", 0) == 0;
    const bool batched = node.op == op_names::kBatchMatMul;
    const Tensor* w = const_value(src_, node.inputs[1]);
    if (!w || w->dtype() != DType::f32)
      return not_rewritten("its right operand is not constant weights");
    const int rank = conv ? 4 : 2;
    const auto x_rank = static_cast<int>(src_.type(node.inputs[0]).shape.size());
    if (!is_f32(node.inputs[0]) || w->rank() != rank || (batched ? x_rank < 2 : x_rank != rank))
      return not_rewritten(fmt::format("the integer kernel takes {}-D inputs", rank));
    if (fused && !is_f32(node.inputs[2])) return not_rewritten("the bias is not float");
    // A binarized layer (1-2-bit weights, `train --binarize`) keeps its binary kernels, which
    // beat the int8 ones; a one-row matrix has that form trivially and is quantized as usual.
    if (w->numel() > w->dim(-1) && quant::signed_levels(*w))
      return not_rewritten("binarized weights keep their binary kernels");
    Tensor weights = *w;
    if (!conv) {
      if (node.attrs.get_bool("transpose_a")) return not_rewritten("transpose_a is set");
      if (node.attrs.get_bool("transpose_b")) weights = transposed_2d(weights);
    }
    const std::string& name = node.name;
    const Activation activation = activation_of(node);
    U8Form x = u8_of(node.inputs[0]);
    if (batched) x.data = ops::reshape(out_, x.data, {-1, weights.dim(0)}, fresh(name + "/rows"));
    SymmetricWeights q = quantize_weights_symmetric(weights, options_.per_channel);
    const Output wq = ops::constant(out_, q.values, fresh(name + "/weights_quantized"));
    const Output ws = ops::constant(out_, q.scales, fresh(name + "/weight_scales"));
    const Output bias =
        fused ? float_of(node.inputs[2])
              : ops::constant(out_, Tensor(DType::f32, {weights.dim(-1)}), fresh(name + "/bias"));
    const std::vector<Output> inputs = {x.data, x.params, wq, ws, bias};
    const std::string accumulate = conv ? op_names::kQuantizedConv2D : op_names::kQuantizedMatMul;
    const Attrs attrs = attrs_for(accumulate, node);
    const std::string result_suffix = batched ? "/quantized_rows" : "/quantized";
    U8Form y;
    std::string quantized_op;
    if (std::optional<TensorRange> range = requantized_range(node)) {
      quantized_op = accumulate + "Requantized";
      y.params = ops::constant(out_, params_for_range(*range), fresh(name + "/out_params"));
      Attrs a = attrs;
      a.set("activation", activation_name(activation));
      std::vector<Output> all = inputs;
      all.push_back(y.params);
      y.data = out_.add(quantized_op, all, a, fresh(name + result_suffix));
    } else {
      // Without a calibrated range the output range is measured on each run's accumulators.
      quantized_op = accumulate;
      const Output acc = out_.add(accumulate, inputs, attrs, fresh(name + "/accumulator"));
      y.params = ops::requantization_range(out_, acc, x.params, ws, activation,
                                           fresh(name + "/requantization_range"));
      y.data = ops::requantize(out_, acc, x.params, ws, y.params, activation,
                               fresh(name + result_suffix));
    }
    if (batched) {
      // The batch stays free, so that the model still runs at other batch sizes.
      Shape rows_back = src_.type({node.id, 0}).shape;
      rows_back[0] = -1;
      y.data = ops::reshape(out_, y.data, rows_back, fresh(name + "/quantized"));
    }
    produced(node, name, {node.id, 0}, quantized_op, y);
    return true;
  }

  // Pooling follows its input: on a float input it stays float, since quantizing after it
  // converts fewer elements than quantizing before it.
  bool rewrite_pool(const Node& node) {
    if (!is_f32_rank(node.inputs[0], 4) || !u8_.count(node.inputs[0]))
      return not_rewritten("input not quantized");
    const U8Form x = u8_of(node.inputs[0]);
    const std::string op = "Quantized" + node.op;
    const Output y = out_.add(op, {x.data}, attrs_for(op, node), fresh(node.name + "/quantized"));
    produced(node, node.name, {node.id, 0}, op, {y, x.params});
    return true;
  }

  // [N,H,W,C] -> [N,C] as an average pool over the whole image and a reshape, so that the
  // classifier heads of ResNet-like models stay 8-bit (on a u8 input, as rewrite_pool).
  bool rewrite_global_avg_pool(const Node& node) {
    if (!is_f32_rank(node.inputs[0], 4) || !u8_.count(node.inputs[0]))
      return not_rewritten("input not quantized");
    const Shape& in = src_.type(node.inputs[0]).shape;
    if (in[1] <= 0 || in[2] <= 0) return false;
    const U8Form x = u8_of(node.inputs[0]);
    ops::PoolOptions pool;
    pool.ksize = {in[1], in[2]};
    pool.strides = {1, 1};
    const Output pooled = ops::quantized_avg_pool(out_, x.data, pool, fresh(node.name + "/pool"));
    const Output y = ops::reshape(out_, pooled, {-1, in[3]}, fresh(node.name + "/quantized"));
    produced(node, node.name, {node.id, 0}, op_names::kQuantizedAvgPool, {y, x.params});
    return true;
  }

  bool rewrite_add(const Node& node) {
    const Output a = node.inputs[0], b = node.inputs[1];
    if (!is_f32(a) || !is_f32(b) || src_.type(a).shape != src_.type(b).shape)
      return not_rewritten("inputs of different shapes");
    const Node* act = fusable_activation(uses_, node.id);
    if (act && options_.exclude.count(act->name)) act = nullptr;
    const Node& last = act ? *act : node;
    // Without a calibrated output range there are no out_params to give QuantizedAdd.
    std::optional<TensorRange> range = range_of(last.name);
    if (!range) return not_rewritten("needs a calibrated output range");
    const U8Form qa = u8_of(a), qb = u8_of(b);
    U8Form y;
    y.params = ops::constant(out_, params_for_range(*range), fresh(node.name + "/out_params"));
    y.data = ops::quantized_add(out_, qa.data, qa.params, qb.data, qb.params, y.params,
                                fused_activation(act), fresh(node.name + "/quantized"));
    if (act) absorbed_.insert(act->id);
    produced(node, last.name, {last.id, 0}, op_names::kQuantizedAdd, y);
    return true;
  }

  bool rewrite_concat(const Node& node) {
    for (const Output& in : node.inputs)
      if (!is_f32(in)) return false;
    std::optional<TensorRange> range = range_of(node.name);
    if (!range) return not_rewritten("needs a calibrated output range");
    std::vector<std::pair<Output, Output>> inputs;
    for (const Output& in : node.inputs) {
      const U8Form q = u8_of(in);
      inputs.push_back({q.data, q.params});
    }
    U8Form y;
    y.params = ops::constant(out_, params_for_range(*range), fresh(node.name + "/out_params"));
    y.data = ops::quantized_concat(out_, inputs, y.params, node.attrs.get_int("axis"),
                                   fresh(node.name + "/quantized"));
    produced(node, node.name, {node.id, 0}, op_names::kQuantizedConcat, y);
    return true;
  }

  // Moving u8 elements is as good as moving floats, and saves a conversion each way; a float
  // input stays float (quantizing it here would gain nothing).
  bool pass_u8_through(const Node& node) {
    if (node.inputs.size() != 1) return false;
    auto it = u8_.find(node.inputs[0]);
    if (it == u8_.end()) return not_rewritten("input not quantized");
    const U8Form x = it->second;
    const Output y = out_.add(node.op, {x.data}, node.attrs, fresh(node.name + "/quantized"));
    u8_[{node.id, 0}] = {y, x.params};
    return true;
  }

  const Graph& src_;
  const EightbitOptions& options_;
  std::vector<std::string>* wanted_;
  std::vector<Output> outputs_;
  GraphUses uses_;
  Rewriter rw_;             // maps each source tensor to its float form in the new graph
  Graph& out_;              // rw_'s target: the new graph
  std::set<int> absorbed_;  // activations fused into the node before them
  std::map<Output, U8Form> u8_;
  std::vector<EightbitLayer> layers_;
  std::vector<FloatNode> float_nodes_;
  std::string why_float_;  // set by a rewrite that declines its node
};

}  // namespace

namespace {

// A graph trained quantization-aware: its learned ranges stand in for calibrated ones (they are
// the ranges the model was trained on), calibration filling only what was not learned.
EightbitOptions with_learned_ranges(const EightbitOptions& options, const LearnedRanges& learned) {
  EightbitOptions out = options;
  if (!out.ranges) out.ranges = TensorRanges{};
  for (const auto& [name, range] : learned.ranges) (*out.ranges)[name] = range;
  return out;
}

}  // namespace

EightbitGraph rewrite_eightbit(const Graph& float_graph, const EightbitOptions& options) {
  if (has_fake_quant(float_graph)) {
    const LearnedRanges learned = take_learned_ranges(float_graph, options.outputs);
    return EightbitRewriter(learned.graph, with_learned_ranges(options, learned), nullptr).run();
  }
  return EightbitRewriter(float_graph, options, nullptr).run();
}

Graph quantize_eightbit(const Graph& float_graph, const EightbitOptions& options) {
  return rewrite_eightbit(float_graph, options).graph;
}

std::vector<std::string> eightbit_range_tensors(const Graph& float_graph,
                                                const EightbitOptions& options) {
  std::vector<std::string> wanted;
  if (!has_fake_quant(float_graph)) {
    EightbitRewriter(float_graph, options, &wanted).run();
    return wanted;
  }
  const LearnedRanges learned = take_learned_ranges(float_graph, options.outputs);
  EightbitRewriter(learned.graph, options, &wanted).run();
  std::erase_if(wanted, [&](const std::string& name) { return learned.ranges.count(name) > 0; });
  return wanted;
}

std::vector<bool> quantization_constants(const Graph& graph) {
  std::vector<bool> read_as_parameters(static_cast<size_t>(graph.num_nodes()), false);
  std::vector<bool> read_otherwise(read_as_parameters.size(), false);
  for (const Node& node : graph.nodes()) {
    const OpDef& def = OpRegistry::global().get(node.op, fmt::format("node '{}'", node.name));
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const auto source = static_cast<size_t>(node.inputs[i].node);
      if (is_quantization_input(def, static_cast<int>(i)))
        read_as_parameters[source] = true;
      else
        read_otherwise[source] = true;
    }
  }
  std::vector<bool> constants(read_as_parameters.size(), false);
  for (const Node& node : graph.nodes()) {
    const auto id = static_cast<size_t>(node.id);
    constants[id] = node.op == op_names::kConst && read_as_parameters[id] && !read_otherwise[id];
  }
  return constants;
}

}  // namespace sf
