// Writers for the float ops: what `slimflow freeze` and the ONNX importer produce. Ops over
// images run channels-first; elementwise ops run in whatever form their inputs are already
// held; ops that depend on the element order (Flatten, Reshape, Softmax, Slice, Pad) read
// the tensor as our graph holds it, so a Flatten of NHWC data flattens in NHWC order.
#include <cmath>

#include "onnx/context.h"
#include "onnx/export_context.h"
#include "ops/conv_geometry.h"
#include "codec/quant_params.h"

namespace sf::onnx_export {

onnx::NodeProto& emit(Context& c, const std::string& op, const std::vector<std::string>& inputs,
                      const Form& form) {
  const std::string out = c.define_out(form);
  return c.add_node(op, inputs, {out});
}

std::string activation(Context& c, const std::string& x, Activation act, const Form& form,
                       bool last) {
  if (act == Activation::None) {
    SF_CHECK(!last, "no activation to make the node's output");
    return x;
  }
  std::vector<std::string> inputs = {x};
  if (act == Activation::Relu6) {
    inputs.push_back(c.scalar_f32(0.0f, c.node->name + "/relu6_min"));
    inputs.push_back(c.scalar_f32(6.0f, c.node->name + "/relu6_max"));
  }
  const std::string op = act == Activation::Relu ? "Relu" : "Clip";
  if (last) return emit(c, op, inputs, form).output(0);
  return c.add(op, inputs, activation_name(act));
}

namespace {

Output in(const Context& c, int i) { return c.node->inputs.at(static_cast<size_t>(i)); }

// ONNX pads [top, left, bottom, right] from our window geometry.
std::vector<int64_t> onnx_pads(const Window2D& w) {
  return {w.h.pad_before, w.w.pad_before, w.h.pad_after, w.w.pad_after};
}

void set_window(onnx::NodeProto& n, const Window2D& w) {
  set_attr(n, "kernel_shape", std::vector<int64_t>{w.h.k, w.w.k});
  set_attr(n, "strides", std::vector<int64_t>{w.h.stride, w.w.stride});
  set_attr(n, "pads", onnx_pads(w));
}

// Writes an op that reads and writes the same form as its first input.
onnx::NodeProto& same_form(Context& c, const std::string& op,
                           const std::vector<std::string>& extra = {}) {
  const Form form = c.held_form(in(c, 0));
  std::vector<std::string> inputs = {c.get(in(c, 0), form)};
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  return emit(c, op, inputs, form);
}

// The output takes over every form of input 0 unchanged (Identity, Dropout).
void alias(Context& c) {
  for (const auto& [form, name] : std::map<Form, std::string>(c.forms(in(c, 0))))
    c.define({c.node->id, 0}, form, name);
}

// Elementwise ops with broadcasting: channels-first when the result is 4-D, an input is
// already held so, and any lower-rank input is a constant (padded and permuted at export).
void elementwise(Context& c, const std::string& op) {
  const size_t rank = c.node->outputs[0].shape.size();
  bool channels_first = false;
  bool all_fit = true;
  for (const Output& o : c.node->inputs) {
    const bool four_d = c.shape(o).size() == 4;
    channels_first |= four_d && c.held_form(o) == kChannelsFirst;
    all_fit &= four_d || c.const_value(o) != nullptr;
  }
  const Form form = rank == 4 && channels_first && all_fit ? kChannelsFirst : kAsIs;
  std::vector<std::string> inputs;
  for (const Output& o : c.node->inputs) {
    if (form == kAsIs || c.shape(o).size() == 4) {
      inputs.push_back(c.get(o, form));
    } else {
      const Tensor& value = *c.const_value(o);
      inputs.push_back(c.initializer(
          onnx_import::permute(value.reshaped(onnx_import::pad_rank(value.shape(), 4)), form),
          c.g.node(o.node).name + "/nchw"));
    }
  }
  emit(c, op, inputs, form);
}

void conv(Context& c) {
  const Node& n = *c.node;
  const Shape& x = c.shape(in(c, 0));
  const Shape& w = c.shape(in(c, 1));
  const Window2D window = conv_window(n.attrs, x, w);
  std::vector<std::string> inputs = {c.get(in(c, 0), kChannelsFirst),
                                     c.get(in(c, 1), kFilterOihw)};
  const bool fused = n.op == "FusedConv2D";
  if (fused) inputs.push_back(c.get(in(c, 2)));
  const Activation act = activation_of(n);
  onnx::NodeProto* node = nullptr;
  std::string y;
  if (act == Activation::None) {
    node = &emit(c, "Conv", inputs, kChannelsFirst);
  } else {
    y = c.add("Conv", inputs, "conv", &node);
  }
  set_attr(*node, "kernel_shape", std::vector<int64_t>{w[0], w[1]});
  set_attr(*node, "strides", std::vector<int64_t>{window.h.stride, window.w.stride});
  set_attr(*node, "dilations", std::vector<int64_t>{window.h.dilation, window.w.dilation});
  set_attr(*node, "pads", onnx_pads(window));
  set_attr(*node, "group", n.attrs.get_int("groups"));
  if (act != Activation::None) activation(c, y, act, kChannelsFirst, true);
}

void gemm(Context& c) {
  const Node& n = *c.node;
  std::vector<std::string> inputs = {c.get(in(c, 0)), c.get(in(c, 1))};
  const bool fused = n.op == "FusedMatMul";
  if (fused) inputs.push_back(c.get(in(c, 2)));
  const Activation act = activation_of(n);
  onnx::NodeProto* node = nullptr;
  std::string y;
  if (act == Activation::None)
    node = &emit(c, "Gemm", inputs, kAsIs);
  else
    y = c.add("Gemm", inputs, "gemm", &node);
  set_attr(*node, "transA", int64_t{n.attrs.get_bool("transpose_a")});
  set_attr(*node, "transB", int64_t{n.attrs.get_bool("transpose_b")});
  if (act != Activation::None) activation(c, y, act, kAsIs, true);
}

void pool(Context& c, const std::string& op) {
  const Window2D window = pool_window(c.node->attrs, c.shape(in(c, 0)));
  onnx::NodeProto& node = emit(c, op, {c.get(in(c, 0), kChannelsFirst)}, kChannelsFirst);
  set_window(node, window);
  if (op == "AveragePool")
    set_attr(node, "count_include_pad", int64_t{c.node->attrs.get_bool("count_include_pad")});
}

// [N,H,W,C] -> [N,C]: GlobalAveragePool gives [N,C,1,1].
void global_avg_pool(Context& c) {
  const std::string pooled =
      c.add("GlobalAveragePool", {c.get(in(c, 0), kChannelsFirst)}, "pool");
  set_attr(emit(c, "Flatten", {pooled}, kAsIs), "axis", int64_t{1});
}

void flatten(Context& c) {
  set_attr(emit(c, "Flatten", {c.get(in(c, 0))}, kAsIs), "axis", c.node->attrs.get_int("axis"));
}

// Dimension 0 follows the batch (0 copies it in ONNX) when it is the input's batch size.
void reshape(Context& c) {
  std::vector<int64_t> shape = c.node->attrs.get_ints("shape");
  const Shape& x = c.shape(in(c, 0));
  if (!shape.empty() && !x.empty() && shape[0] == x[0]) shape[0] = 0;
  emit(c, "Reshape", {c.get(in(c, 0)), c.ints_i64(shape, c.node->name + "/shape")}, kAsIs);
}

// No node: y = permute(x, P), so x held in form F is y in form G with G[i] = inv(P)[F[i]].
void transpose(Context& c) {
  const size_t rank = c.shape(in(c, 0)).size();
  Form perm = c.node->attrs.get_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
  Form inverse(rank);
  for (size_t i = 0; i < rank; ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  for (const auto& [form, name] : std::map<Form, std::string>(c.forms(in(c, 0)))) {
    Form g(rank);
    for (size_t i = 0; i < rank; ++i)
      g[i] = inverse[static_cast<size_t>(form.empty() ? static_cast<int64_t>(i) : form[i])];
    c.define({c.node->id, 0}, g, name);
  }
}

void concat(Context& c) {
  const size_t rank = c.node->outputs[0].shape.size();
  bool channels_first = rank == 4;
  for (const Output& o : c.node->inputs)
    channels_first &= c.has_form(o, kChannelsFirst) || c.const_value(o) != nullptr;
  const Form form = channels_first ? kChannelsFirst : kAsIs;
  std::vector<std::string> inputs;
  for (const Output& o : c.node->inputs) inputs.push_back(c.get(o, form));
  set_attr(emit(c, "Concat", inputs, form), "axis",
           axis_in(form, c.node->attrs.get_int("axis"), rank));
}

// ONNX MatMul has no transpose flags: an operand read transposed is written with its last two
// axes swapped (a Transpose node, or folded into constant weights).
void batch_matmul(Context& c) {
  std::vector<std::string> inputs;
  for (int i = 0; i < 2; ++i) {
    Form form = kAsIs;
    if (c.node->attrs.get_bool(i == 0 ? "transpose_a" : "transpose_b")) {
      const auto rank = static_cast<int64_t>(c.shape(in(c, i)).size());
      for (int64_t axis = 0; axis < rank; ++axis) form.push_back(axis);
      std::swap(form[static_cast<size_t>(rank - 2)], form[static_cast<size_t>(rank - 1)]);
    }
    inputs.push_back(c.get(in(c, i), form));
  }
  emit(c, "MatMul", inputs, kAsIs);
}

// Opsets 13-17 take ReduceMean's axes as an attribute; none means every axis, as ours.
void reduce_mean(Context& c) {
  onnx::NodeProto& node = emit(c, "ReduceMean", {c.get(in(c, 0))}, kAsIs);
  const std::vector<int64_t>& axes = c.node->attrs.get_ints("axes");
  if (!axes.empty()) set_attr(node, "axes", axes);
  set_attr(node, "keepdims", int64_t{c.node->attrs.get_bool("keep_dims") ? 1 : 0});
}

// GRU and LSTM nodes keep ONNX's layouts (time-major X; W [dirs, gates*hidden, in], R, B; the
// initial states; LSTM's peepholes), so their inputs pass as they are; sequence_lens is left
// out, every sequence being whole.
void recurrent(Context& c, bool lstm) {
  const Attrs& a = c.node->attrs;
  std::vector<std::string> inputs;
  for (int i = 0; i < 4; ++i) inputs.push_back(c.get(in(c, i)));
  inputs.push_back("");  // sequence_lens
  inputs.push_back(c.get(in(c, 4)));
  if (lstm) {
    inputs.push_back(c.get(in(c, 5)));
    if (a.get_bool("peepholes")) inputs.push_back(c.get(in(c, 6)));
  }
  std::vector<std::string> outputs;
  for (int i = 0; i < (lstm ? 3 : 2); ++i) outputs.push_back(c.define_out(kAsIs, i));
  onnx::NodeProto& node = c.add_node(lstm ? "LSTM" : "GRU", inputs, outputs);
  set_attr(node, "hidden_size", c.shape(in(c, 1))[1] / (lstm ? 4 : 3));
  set_attr(node, "direction", a.get_string("direction"));
  if (!lstm && a.get_bool("linear_before_reset")) set_attr(node, "linear_before_reset", int64_t{1});
}

void softmax(Context& c) {
  set_attr(emit(c, "Softmax", {c.get(in(c, 0))}, kAsIs), "axis", int64_t{-1});
}

// A learned activation range of quantization-aware training: the u8 round trip it stands for,
// QuantizeLinear -> DequantizeLinear, which ONNX Runtime treats as the QDQ form of the model.
void fake_quant_activation(Context& c) {
  const Tensor& range = c.const_in(1, "range");
  const float* r = range.data<float>();
  if (!std::isfinite(r[0]) || !std::isfinite(r[1]))
    c.fail("its range was never learned (the run trained for no steps)");
  const QuantParams p = choose_quant_params(r[0], r[1]);
  Tensor zero_point(DType::u8, {});
  zero_point.data<uint8_t>()[0] = static_cast<uint8_t>(p.zero_point);
  const std::string scale = c.scalar_f32(p.scale, c.node->name + "/scale");
  const std::string zero = c.initializer(zero_point, c.node->name + "/zero_point");
  const Form form = c.held_form(in(c, 0));
  const std::string q = c.add("QuantizeLinear", {c.get(in(c, 0), form), scale, zero}, "quantize");
  emit(c, "DequantizeLinear", {q, scale, zero}, form);
}

// BatchNormalization normalizes axis 1: channels-first images, or [N,C].
void batch_norm(Context& c) {
  const size_t rank = c.shape(in(c, 0)).size();
  if (rank != 4 && rank != 2) c.fail("rank-{} input has no ONNX BatchNormalization form", rank);
  const Form form = rank == 4 ? kChannelsFirst : kAsIs;
  std::vector<std::string> inputs = {c.get(in(c, 0), form)};
  for (int i = 1; i < 5; ++i) inputs.push_back(c.get(in(c, i)));
  set_attr(emit(c, "BatchNormalization", inputs, form), "epsilon",
           static_cast<float>(c.node->attrs.get_float("epsilon")));
}

void clip(Context& c) {
  const Attrs& a = c.node->attrs;
  same_form(c, "Clip",
            {c.scalar_f32(static_cast<float>(a.get_float("min")), c.node->name + "/min"),
             c.scalar_f32(static_cast<float>(a.get_float("max")), c.node->name + "/max")});
}

void strided_slice(Context& c) {
  const Attrs& a = c.node->attrs;
  const std::vector<int64_t>& starts = a.get_ints("starts");
  std::vector<int64_t> axes = a.get_ints("axes");
  std::vector<int64_t> steps = a.get_ints("steps");
  for (size_t i = axes.size(); i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  const std::string& base = c.node->name;
  emit(c, "Slice",
       {c.get(in(c, 0)), c.ints_i64(starts, base + "/starts"),
        c.ints_i64(a.get_ints("ends"), base + "/ends"), c.ints_i64(axes, base + "/axes"),
        c.ints_i64(steps, base + "/steps")},
       kAsIs);
}

void pad(Context& c) {
  const Attrs& a = c.node->attrs;
  const std::string& base = c.node->name;
  onnx::NodeProto& node =
      emit(c, "Pad",
           {c.get(in(c, 0)), c.ints_i64(a.get_ints("pads"), base + "/pads"),
            c.scalar_f32(static_cast<float>(a.get_float("value")), base + "/value")},
           kAsIs);
  set_attr(node, "mode", a.get_string("mode"));
}

}  // namespace

void add_float_writers(WriterMap& m) {
  m["Identity"] = alias;
  m["Dropout"] = alias;  // inference: output 0 is the input
  m["Conv2D"] = conv;
  m["FusedConv2D"] = conv;
  m["MatMul"] = gemm;
  m["FusedMatMul"] = gemm;
  m["BiasAdd"] = [](Context& c) { elementwise(c, "Add"); };
  m["Add"] = [](Context& c) { elementwise(c, "Add"); };
  m["Sub"] = [](Context& c) { elementwise(c, "Sub"); };
  m["Mul"] = [](Context& c) { elementwise(c, "Mul"); };
  m["Div"] = [](Context& c) { elementwise(c, "Div"); };
  m["Pow"] = [](Context& c) { elementwise(c, "Pow"); };
  m["Relu"] = [](Context& c) { same_form(c, "Relu"); };
  m["Relu6"] = [](Context& c) {
    same_form(c, "Clip", {c.scalar_f32(0.0f, c.node->name + "/min"),
                          c.scalar_f32(6.0f, c.node->name + "/max")});
  };
  m["Sigmoid"] = [](Context& c) { same_form(c, "Sigmoid"); };
  m["Tanh"] = [](Context& c) { same_form(c, "Tanh"); };
  m["Exp"] = [](Context& c) { same_form(c, "Exp"); };
  m["Log"] = [](Context& c) { same_form(c, "Log"); };
  m["Sqrt"] = [](Context& c) { same_form(c, "Sqrt"); };
  m["Neg"] = [](Context& c) { same_form(c, "Neg"); };
  m["Erf"] = [](Context& c) { same_form(c, "Erf"); };
  m["BatchMatMul"] = batch_matmul;
  m["Gather"] = [](Context& c) {
    set_attr(emit(c, "Gather", {c.get(in(c, 0)), c.get(in(c, 1))}, kAsIs), "axis",
             c.node->attrs.get_int("axis"));
  };
  m["Gru"] = [](Context& c) { recurrent(c, false); };
  m["Lstm"] = [](Context& c) { recurrent(c, true); };
  m["ReduceMean"] = reduce_mean;
  m["LeakyRelu"] = [](Context& c) {
    set_attr(same_form(c, "LeakyRelu"), "alpha",
             static_cast<float>(c.node->attrs.get_float("alpha")));
  };
  m["Clip"] = clip;
  m["MaxPool"] = [](Context& c) { pool(c, "MaxPool"); };
  m["AvgPool"] = [](Context& c) { pool(c, "AveragePool"); };
  m["GlobalAvgPool"] = global_avg_pool;
  m["Flatten"] = flatten;
  m["Reshape"] = reshape;
  m["Transpose"] = transpose;
  m["Concat"] = concat;
  m["Softmax"] = softmax;
  m["BatchNorm"] = batch_norm;
  m["FakeQuantActivation"] = fake_quant_activation;
  m["StridedSlice"] = strided_slice;
  m["Pad"] = pad;
}

}  // namespace sf::onnx_export
