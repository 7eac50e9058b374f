// QDQ groups -> the engine's integer ops (see qdq_fusion.h for the groups and the rules).
#include "onnx/qdq_fusion.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/op_names.h"
#include "ops/ops.h"

namespace sf::onnx_import {

namespace {

bool is_linear(const std::string& op) { return op == "Conv" || op == "MatMul" || op == "Gemm"; }
bool is_move(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Transpose";
}
bool is_pool(const std::string& op) { return op == "MaxPool" || op == "AveragePool"; }

bool has_input(const onnx::NodeProto& n, int i) {
  return i < n.input_size() && !n.input(i).empty();
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const onnx::AttributeProto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool same_params(QuantParams a, QuantParams b) {
  return a.scale == b.scale && a.zero_point == b.zero_point;
}

bool positive_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float s) { return s > 0.0f && std::isfinite(s); });
}

Tensor zeros(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  t.fill_zero();
  return t;
}

}  // namespace

QdqFusion::QdqFusion(Context& c, const onnx::GraphProto& graph, bool enabled) : c_(c) {
  if (enabled) find_groups(graph);
}

void QdqFusion::find_groups(const onnx::GraphProto& graph) {
  for (const onnx::NodeProto& n : graph.node()) {
    position_[&n] = position_.size();
    for (const std::string& out : n.output()) producer_[out] = &n;
    for (const std::string& in : n.input()) readers_[in].push_back(&n);
  }
  for (const onnx::ValueInfoProto& out : graph.output()) graph_outputs_.insert(out.name());
  std::map<const onnx::NodeProto*, const QdqGroup*> group_of_op;
  for (const onnx::NodeProto& n : graph.node())
    if (n.op_type() == "QuantizeLinear")
      if (std::optional<QdqGroup> g = match(n)) groups_.push_back(std::move(*g));
  for (size_t i = 0; i < groups_.size(); ++i) {
    group_ending_at_[groups_[i].quantize] = i;
    group_of_op[groups_[i].op] = &groups_[i];
  }
  // The op and activation belong to their group alone; a DQ waits when only groups read it,
  // each of them as one of its own DQs.
  for (const QdqGroup& g : groups_)
    for (const onnx::NodeProto* m : g.members) {
      if (m == g.op || m == g.activation) {
        waiting_.insert(m);
        continue;
      }
      const std::string& value = m->output(0);
      bool only_groups = !graph_outputs_.count(value);
      for (const onnx::NodeProto* reader : readers_[value]) {
        auto it = group_of_op.find(reader);
        only_groups = only_groups && it != group_of_op.end() &&
                      std::count(it->second->members.begin(), it->second->members.end(), m) > 0;
      }
      if (only_groups) waiting_.insert(m);
    }
}

// The node producing `value` when nothing but one node reads it and it is no graph output.
const onnx::NodeProto* QdqFusion::sole_producer(const std::string& value) const {
  auto p = producer_.find(value);
  auto r = readers_.find(value);
  if (p == producer_.end() || r == readers_.end() || r->second.size() != 1 ||
      graph_outputs_.count(value))
    return nullptr;
  return p->second;
}

// The DequantizeLinear producing input `input` of n, if one does.
const onnx::NodeProto* QdqFusion::dequantize_at(const onnx::NodeProto& n, int input) const {
  if (!has_input(n, input)) return nullptr;
  auto p = producer_.find(n.input(input));
  if (p == producer_.end() || p->second->op_type() != "DequantizeLinear") return nullptr;
  return p->second;
}

// The group ending at `quantize`, judged by structure only (values are checked in emit).
std::optional<QdqGroup> QdqFusion::match(const onnx::NodeProto& quantize) const {
  QdqGroup g;
  g.quantize = &quantize;
  const onnx::NodeProto* op = sole_producer(quantize.input(0));
  if (op && (op->op_type() == "Relu" || op->op_type() == "Clip")) {
    g.activation = op;
    op = sole_producer(op->input(0));
  }
  if (!op) return std::nullopt;
  const std::string& type = op->op_type();
  const bool fuses_activation = is_linear(type) || type == "Add";
  if (!fuses_activation && !is_pool(type) && !is_move(type) && type != "Concat")
    return std::nullopt;
  if (g.activation && !fuses_activation) return std::nullopt;
  for (int i = 1; i < op->output_size(); ++i)
    if (!op->output(i).empty()) return std::nullopt;  // e.g. MaxPool's Indices
  g.op = op;
  const int activation_inputs = type == "Add" ? 2 : type == "Concat" ? op->input_size() : 1;
  for (int i = 0; i < activation_inputs; ++i) {
    const onnx::NodeProto* dq = dequantize_at(*op, i);
    if (!dq) return std::nullopt;
    g.inputs.push_back(dq);
  }
  if (is_linear(type)) {
    g.weights = dequantize_at(*op, 1);
    if (!g.weights) return std::nullopt;
    if (type != "MatMul") g.bias = dequantize_at(*op, 2);
  }
  std::set<const onnx::NodeProto*> members(g.inputs.begin(), g.inputs.end());
  for (const onnx::NodeProto* n : {g.weights, g.bias, g.op, g.activation})
    if (n) members.insert(n);
  g.members.assign(members.begin(), members.end());
  std::sort(g.members.begin(), g.members.end(),
            [&](const onnx::NodeProto* a, const onnx::NodeProto* b) {
              return position_.at(a) < position_.at(b);
            });
  return g;
}

void QdqFusion::convert(const onnx::NodeProto& n) {
  if (waiting_.count(&n)) return;
  auto it = group_ending_at_.find(&n);
  if (it != group_ending_at_.end()) {
    const QdqGroup& g = groups_[it->second];
    bool fused = false;
    convert_as(c_, *g.op, [&] { fused = emit(g); });
    if (fused) return;
    for (const onnx::NodeProto* m : g.members)
      if (waiting_.count(m) && converted_.insert(m).second) convert_node(c_, *m);
  }
  convert_node(c_, n);
}

// --- reading the group's values ---

const Tensor* QdqFusion::constant_input(const onnx::NodeProto& n, int input) const {
  if (!has_input(n, input)) return nullptr;
  auto it = c_.values.find(n.input(input));
  return it != c_.values.end() && it->second.is_const() ? &*it->second.constant : nullptr;
}

// The per-tensor u8 scale and zero point of a Q or DQ node, when they are constants.
std::optional<QuantParams> QdqFusion::u8_params(const onnx::NodeProto& n) const {
  const Tensor* scale = constant_input(n, 1);
  if (!scale || scale->dtype() != DType::f32 || scale->numel() != 1) return std::nullopt;
  QuantParams p{scale->data<float>()[0], 0};
  if (!positive_finite({p.scale})) return std::nullopt;
  if (has_input(n, 2)) {
    const Tensor* zero = constant_input(n, 2);
    if (!zero || zero->dtype() != DType::u8 || zero->numel() != 1) return std::nullopt;
    p.zero_point = zero->data<uint8_t>()[0];
  }
  return p;
}

std::optional<QdqFusion::U8Input> QdqFusion::u8_input(const onnx::NodeProto& dq) const {
  auto it = c_.values.find(dq.input(0));
  if (it == c_.values.end() || it->second.dtype != DType::u8) return std::nullopt;
  std::optional<QuantParams> p = u8_params(dq);
  if (!p) return std::nullopt;
  return U8Input{&it->second, *p};
}

// Our kernels take symmetric i8 weights: a constant i8 tensor, zero points absent or zero, and
// scales per tensor or along the output-channel axis.
std::optional<QdqFusion::I8Weights> QdqFusion::i8_weights(const onnx::NodeProto& dq,
                                                          int64_t channel_axis) const {
  const Tensor* w = constant_input(dq, 0);
  const Tensor* scale = constant_input(dq, 1);
  if (!w || w->dtype() != DType::i8 || w->rank() <= channel_axis) return std::nullopt;
  if (!scale || scale->dtype() != DType::f32 || !positive_finite(to_floats(*scale)))
    return std::nullopt;
  if (scale->numel() != 1) {
    const onnx::AttributeProto* axis_attr = find_attr(dq, "axis");
    int64_t axis = axis_attr ? axis_attr->i() : 1;
    if (axis < 0) axis += w->rank();
    if (scale->rank() != 1 || axis != channel_axis ||
        scale->numel() != w->dim(static_cast<int>(axis)))
      return std::nullopt;
  }
  if (has_input(dq, 2)) {
    const Tensor* zero = constant_input(dq, 2);
    if (!zero || zero->dtype() != DType::i8) return std::nullopt;
    const std::vector<int64_t> z = to_ints(*zero);
    if (std::any_of(z.begin(), z.end(), [](int64_t v) { return v != 0; })) return std::nullopt;
  }
  return I8Weights{*w, scale->reshaped({scale->numel()})};
}

// The float bias [channels] of a Conv or Gemm (input 2) times beta: a dequantized constant
// (ONNX Runtime quantizes it to i32 in units of x_scale * w_scale, which our kernels round it
// back to) or a float constant; zeros when absent.
std::optional<Tensor> QdqFusion::float_bias(const QdqGroup& g, int64_t channels, float beta) const {
  if (!has_input(*g.op, 2) || beta == 0.0f) return zeros(DType::f32, {channels});
  Tensor bias;
  if (g.bias) {
    const Tensor* q = constant_input(*g.bias, 0);
    const Tensor* scale = constant_input(*g.bias, 1);
    const Tensor* zero = constant_input(*g.bias, 2);
    if (!q || q->rank() != 1 || !scale || scale->dtype() != DType::f32) return std::nullopt;
    if (scale->numel() != 1 && scale->numel() != q->numel()) return std::nullopt;
    if (has_input(*g.bias, 2) && (!zero || zero->numel() != scale->numel())) return std::nullopt;
    bias = dequantize_tensor(*q, *scale, zero ? *zero : zeros(q->dtype(), {scale->numel()}), 0);
  } else {
    const Tensor* f = constant_input(*g.op, 2);
    if (!f || f->dtype() != DType::f32) return std::nullopt;
    bias = *f;
  }
  if (bias.numel() != channels || num_elements(bias.shape()) != bias.dim(-1)) return std::nullopt;
  bias = bias.reshaped({channels});
  return beta == 1.0f ? bias : evaluate_reference(op_names::kMul, {bias, Tensor::scalar_f32(beta)});
}

// The activation our integer ops apply for g.activation: none, relu (Relu, Clip(0, inf)) or
// relu6 (Clip(0, 6)); nullopt for other clips.
std::optional<Activation> QdqFusion::activation(const QdqGroup& g) const {
  if (!g.activation) return Activation::None;
  const onnx::NodeProto& a = *g.activation;
  if (a.op_type() == "Relu") return Activation::Relu;
  const float inf = std::numeric_limits<float>::infinity();
  float lo = -inf, hi = inf;
  if (c_.opset < 11) {
    if (const onnx::AttributeProto* min = find_attr(a, "min")) lo = min->f();
    if (const onnx::AttributeProto* max = find_attr(a, "max")) hi = max->f();
  } else {
    for (int i : {1, 2}) {
      if (!has_input(a, i)) continue;
      const Tensor* bound = constant_input(a, i);
      if (!bound || bound->numel() != 1) return std::nullopt;
      (i == 1 ? lo : hi) = to_floats(*bound)[0];
    }
  }
  const float max_float = std::numeric_limits<float>::max();
  if (lo == 0.0f && hi == 6.0f) return Activation::Relu6;
  if (lo == 0.0f && hi >= max_float) return Activation::Relu;
  if (lo <= -max_float && hi >= max_float) return Activation::None;
  return std::nullopt;
}

// --- emitting the integer ops (c_.node is the group's op) ---

Output QdqFusion::params(QuantParams p, const std::string& suffix) {
  return c_.constant(Tensor::from_vector<float>({2}, {p.scale, static_cast<float>(p.zero_point)}),
                     suffix);
}

void QdqFusion::define(const onnx::NodeProto& quantize, Output y, Layout layout) {
  Value v;
  v.dtype = c_.g.type(y).dtype;
  v.shape = c_.onnx_shape(y, layout);
  (layout == Layout::kNhwc ? v.nhwc : v.plain) = y;
  c_.values[quantize.output(0)] = std::move(v);
}

bool QdqFusion::emit(const QdqGroup& g) {
  const std::optional<QuantParams> out = u8_params(*g.quantize);
  if (!out) return false;
  const std::string& op = g.op->op_type();
  if (op == "Conv") return emit_conv(g, *out);
  if (op == "MatMul" || op == "Gemm") return emit_matmul(g, *out);
  if (is_pool(op)) return emit_pool(g, *out);
  if (op == "Add") return emit_add(g, *out);
  if (op == "Concat") return emit_concat(g, *out);
  return emit_move(g, *out);
}

bool QdqFusion::emit_conv(const QdqGroup& g, QuantParams out) {
  const std::optional<U8Input> x = u8_input(*g.inputs[0]);
  const std::optional<I8Weights> w = i8_weights(*g.weights, 0);  // OIHW: O is axis 0
  if (!x || x->data->shape.size() != 4 || !w || w->values.rank() != 4) return false;
  const std::optional<Tensor> bias = float_bias(g, w->values.dim(0), 1.0f);
  const std::optional<Activation> act = activation(g);
  if (!bias || !act) return false;
  Attrs a = conv2d_attrs(c_, x->data->shape, w->values.shape());
  a.set("activation", activation_name(*act));
  const Output y = c_.add(
      op_names::kQuantizedConv2DRequantized,
      {c_.nhwc(*x->data), params(x->params, "x_params"),
       c_.constant(permute(w->values, {2, 3, 1, 0}), "filter"), c_.constant(w->scales, "w_scales"),
       c_.constant(*bias, "bias"), params(out, "out_params")},
      a);
  define(*g.quantize, y, Layout::kNhwc);
  return true;
}

// MatMul, and Gemm without transA: alpha scales the weight scales, beta the bias.
bool QdqFusion::emit_matmul(const QdqGroup& g, QuantParams out) {
  const bool gemm = g.op->op_type() == "Gemm";
  const float alpha = gemm ? c_.attr_float("alpha", 1.0f) : 1.0f;
  const float beta = gemm ? c_.attr_float("beta", 1.0f) : 1.0f;
  const bool transpose_b = gemm && c_.attr_int("transB", 0) != 0;
  if (gemm && (c_.attr_int("transA", 0) != 0 || !positive_finite({alpha}))) return false;
  const std::optional<U8Input> a = u8_input(*g.inputs[0]);
  // B is [K,N], or [N,K] when transposed; N is the output channel.
  const std::optional<I8Weights> b = i8_weights(*g.weights, transpose_b ? 0 : 1);
  if (!a || a->data->shape.size() != 2 || !b || b->values.rank() != 2) return false;
  const Tensor weights = transpose_b ? permute(b->values, {1, 0}) : b->values;
  if (weights.dim(0) != a->data->shape[1]) return false;  // the float op reports it
  const std::optional<Tensor> bias = float_bias(g, weights.dim(1), beta);
  const std::optional<Activation> act = activation(g);
  if (!bias || !act) return false;
  const Tensor scales =
      alpha == 1.0f ? b->scales
                    : evaluate_reference(op_names::kMul, {b->scales, Tensor::scalar_f32(alpha)});
  const Output y = c_.add(
      op_names::kQuantizedMatMulRequantized,
      {c_.plain(*a->data), params(a->params, "a_params"), c_.constant(weights, "weights"),
       c_.constant(scales, "w_scales"), c_.constant(*bias, "bias"), params(out, "out_params")},
      {{"activation", activation_name(*act)}});
  define(*g.quantize, y, Layout::kPlain);
  return true;
}

// The integer pools keep their input's scale and zero point, so the Q must use the DQ's.
bool QdqFusion::emit_pool(const QdqGroup& g, QuantParams out) {
  const std::optional<U8Input> x = u8_input(*g.inputs[0]);
  if (!x || x->data->shape.size() != 4 || !same_params(x->params, out)) return false;
  const bool max = g.op->op_type() == "MaxPool";
  const Attrs a = pool2d_attrs(c_, x->data->shape, max);
  // Padding counted in an average is worth the zero point, which QuantizedAvgPool lacks.
  if (!max && a.get_bool("count_include_pad")) return false;
  const Output y = c_.add(max ? op_names::kQuantizedMaxPool : op_names::kQuantizedAvgPool,
                          {c_.nhwc(*x->data)}, a);
  define(*g.quantize, y, Layout::kNhwc);
  return true;
}

// QuantizedAdd does not broadcast: both inputs must have the same shape.
bool QdqFusion::emit_add(const QdqGroup& g, QuantParams out) {
  const std::optional<U8Input> a = u8_input(*g.inputs[0]);
  const std::optional<U8Input> b = u8_input(*g.inputs[1]);
  const std::optional<Activation> act = activation(g);
  if (!a || !b || !act || a->data->shape != b->data->shape) return false;
  const Layout l = elementwise_layout(c_, {a->data, b->data});
  const Output y = c_.add(op_names::kQuantizedAdd,
                          {c_.get(*a->data, l), params(a->params, "a_params"), c_.get(*b->data, l),
                           params(b->params, "b_params"), params(out, "out_params")},
                          {{"activation", activation_name(*act)}});
  define(*g.quantize, y, l);
  return true;
}

bool QdqFusion::emit_concat(const QdqGroup& g, QuantParams out) {
  std::vector<U8Input> xs;
  std::vector<Value*> values;
  for (const onnx::NodeProto* dq : g.inputs) {
    const std::optional<U8Input> x = u8_input(*dq);
    if (!x) return false;
    xs.push_back(*x);
    values.push_back(x->data);
  }
  const int64_t rank = static_cast<int64_t>(xs[0].data->shape.size());
  int64_t axis = c_.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;  // the float op reports it
  const Layout l = elementwise_layout(c_, values);
  if (l == Layout::kNhwc) axis = kToNchw[static_cast<size_t>(axis)];
  std::vector<Output> inputs;
  for (size_t i = 0; i < xs.size(); ++i) {
    inputs.push_back(c_.get(*xs[i].data, l));
    inputs.push_back(params(xs[i].params, fmt::format("x{}_params", i)));
  }
  inputs.push_back(params(out, "out_params"));
  define(*g.quantize, c_.add(op_names::kQuantizedConcat, inputs, {{"axis", axis}}), l);
  return true;
}

// Moving u8 elements keeps their scale and zero point: the op itself is converted on the u8
// data the DQ reads, producing the Q's output.
bool QdqFusion::emit_move(const QdqGroup& g, QuantParams out) {
  const std::optional<U8Input> x = u8_input(*g.inputs[0]);
  if (!x || !same_params(x->params, out)) return false;
  onnx::NodeProto moved = *g.op;
  moved.set_input(0, g.inputs[0]->input(0));
  moved.set_output(0, g.quantize->output(0));
  convert_node(c_, moved);
  c_.node = g.op;  // `moved` goes away
  return true;
}

}  // namespace sf::onnx_import
