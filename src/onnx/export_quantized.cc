// Writers for the integer ops of calibrated eightbit graphs, in ONNX Runtime's QDQ format: each
// integer op becomes DequantizeLinear on its inputs, the float op, and QuantizeLinear with the
// op's output params, which ONNX Runtime fuses back into QLinearConv, QGemm, QLinearAdd, ...
//
// Agreement with our kernels: a DequantizeLinear -> Conv of u8 x and i8 w computes exactly our
// accumulator times x_scale * w_scale (bias included: ours adds round(bias / (x_scale *
// w_scale)), which is what the exported i32 bias holds); the final QuantizeLinear rounds half
// to even where our fixed-point requantization rounds half away from zero, so outputs may
// differ by one step on exact ties.
#include <cmath>

#include "onnx/export_context.h"
#include "ops/conv_geometry.h"
#include "codec/quant_params.h"

namespace sf::onnx_export {

namespace {

Output in(const Context& c, int i) { return c.node->inputs.at(static_cast<size_t>(i)); }

QuantParams params_value(Context& c, Output params) {
  c.quant_params(params);  // validates
  const float* p = c.const_value(params)->data<float>();
  return {p[0], static_cast<int32_t>(p[1])};
}

// The params of a u8 tensor of our graph: the op that made it names them, and ops that only
// move or select elements keep their input's.
Output params_of(Context& c, Output u8) {
  const Node& n = c.g.node(u8.node);
  if (n.op == "Quantize") return n.inputs[1];
  if (n.op == "QuantizedConv2DRequantized" || n.op == "QuantizedMatMulRequantized")
    return n.inputs[5];
  if (n.op == "QuantizedAdd" || n.op == "QuantizedConcat") return n.inputs.back();
  if (n.op == "QuantizedMaxPool" || n.op == "QuantizedAvgPool" || n.op == "Reshape" ||
      n.op == "Flatten" || n.op == "Identity" || n.op == "Transpose" || n.op == "StridedSlice")
    return params_of(c, n.inputs[0]);
  c.fail("the params of its u8 input '{}' ({}) are unknown", n.name, n.op);
}

// Our u8 tensor as float in `form`. Every reader gets a DequantizeLinear of its own: ONNX
// Runtime fuses DQ -> op -> Q only where each DQ feeds that one op.
std::string dequantized(Context& c, Output u8, Output params, const Form& form) {
  const QuantNames q = c.quant_params(params);
  return c.add("DequantizeLinear", {c.get(u8, form), q.scale, q.zero_point}, "dequantize");
}

// QuantizeLinear of float value `x` into `params`, as the current node's output in `form`.
void quantize_out(Context& c, const std::string& x, Output params, const Form& form) {
  const QuantNames q = c.quant_params(params);
  emit(c, "QuantizeLinear", {x, q.scale, q.zero_point}, form);
}

// A fused activation before the output's QuantizeLinear. Where the u8 range the activation
// leaves is all of 0..255 (ReLU with zero point 0, ReLU6 whose 6 lies beyond the range) the
// QuantizeLinear saturates exactly there and the activation is left out, so that ONNX Runtime
// sees the plain DQ -> Conv -> Q it fuses.
std::string before_requantize(Context& c, const std::string& y, Activation act, QuantParams out,
                              const Form& form) {
  const QuantClamp clamp = activation_clamp(act, out);
  if (clamp.lo == 0 && clamp.hi == 255) return y;
  return activation(c, y, act, form, false);
}

// i8 weights (form: OIHW filters or [N,K] Gemm weights, output channels on axis 0) with their
// scales, and the f32 bias as i32 in units of x_scale * w_scale, each behind DequantizeLinear.
struct LinearInputs {
  std::string w, bias;
};

LinearInputs linear_inputs(Context& c, const Form& weight_form, QuantParams x) {
  const Tensor& scales = c.const_in(3, "w_scales");
  const Tensor& bias = c.const_in(4, "bias");
  const int64_t channels = bias.numel();
  const bool per_channel = scales.numel() > 1;
  const float* s = scales.data<float>();
  const float* b = bias.data<float>();
  const std::string& base = c.node->name;
  const Shape scale_shape = per_channel ? Shape{channels} : Shape{};

  Tensor w_scale(DType::f32, scale_shape), w_zero(DType::i8, scale_shape);
  Tensor b_scale(DType::f32, scale_shape), b_zero(DType::i32, scale_shape);
  w_zero.fill_zero();
  b_zero.fill_zero();
  Tensor b_values(DType::i32, {channels});
  for (int64_t k = 0; k < scales.numel(); ++k) {
    w_scale.data<float>()[k] = s[k];
    b_scale.data<float>()[k] =
        static_cast<float>(static_cast<double>(x.scale) * static_cast<double>(s[k]));
  }
  for (int64_t k = 0; k < channels; ++k)
    b_values.data<int32_t>()[k] = quantize_bias(b[k], x.scale, s[per_channel ? k : 0]);

  onnx::NodeProto* w_node = nullptr;
  onnx::NodeProto* b_node = nullptr;
  LinearInputs out;
  out.w = c.add("DequantizeLinear",
                {c.get(in(c, 2), weight_form), c.initializer(w_scale, base + "/weight_scale"),
                 c.initializer(w_zero, base + "/weight_zero_point")},
                "weights", &w_node);
  out.bias = c.add("DequantizeLinear",
                   {c.initializer(b_values, base + "/bias_quantized"),
                    c.initializer(b_scale, base + "/bias_scale"),
                    c.initializer(b_zero, base + "/bias_zero_point")},
                   "bias", &b_node);
  if (per_channel) {
    set_attr(*w_node, "axis", int64_t{0});
    set_attr(*b_node, "axis", int64_t{0});
  }
  return out;
}

void quantized_conv(Context& c) {
  const Node& n = *c.node;
  const Output x_params = in(c, 1), out_params = in(c, 5);
  const QuantParams x = params_value(c, x_params), out = params_value(c, out_params);
  const Shape& w = c.shape(in(c, 2));
  const Window2D window = conv_window(n.attrs, c.shape(in(c, 0)), w);
  const std::string xf = dequantized(c, in(c, 0), x_params, kChannelsFirst);
  const LinearInputs wb = linear_inputs(c, kFilterOihw, x);
  onnx::NodeProto* conv = nullptr;
  const std::string y = c.add("Conv", {xf, wb.w, wb.bias}, "conv", &conv);
  set_attr(*conv, "kernel_shape", std::vector<int64_t>{w[0], w[1]});
  set_attr(*conv, "strides", std::vector<int64_t>{window.h.stride, window.w.stride});
  set_attr(*conv, "dilations", std::vector<int64_t>{window.h.dilation, window.w.dilation});
  set_attr(*conv, "pads", std::vector<int64_t>{window.h.pad_before, window.w.pad_before,
                                               window.h.pad_after, window.w.pad_after});
  set_attr(*conv, "group", n.attrs.get_int("groups"));
  const std::string act = before_requantize(c, y, activation_of(n), out, kChannelsFirst);
  quantize_out(c, act, out_params, kChannelsFirst);
}

void quantized_gemm(Context& c) {
  const Output a_params = in(c, 1), out_params = in(c, 5);
  const QuantParams a = params_value(c, a_params), out = params_value(c, out_params);
  const std::string af = dequantized(c, in(c, 0), a_params, kAsIs);
  const LinearInputs wb = linear_inputs(c, kSwapRows, a);
  onnx::NodeProto* gemm = nullptr;
  const std::string y = c.add("Gemm", {af, wb.w, wb.bias}, "gemm", &gemm);
  set_attr(*gemm, "transB", int64_t{1});
  const std::string act = before_requantize(c, y, activation_of(*c.node), out, kAsIs);
  quantize_out(c, act, out_params, kAsIs);
}

// Pooling keeps the input's params: DQ -> pool -> Q with the same scale and zero point, which
// ONNX Runtime runs on u8 directly.
void quantized_pool(Context& c, const std::string& op) {
  const Output params = params_of(c, in(c, 0));
  const Window2D window = pool_window(c.node->attrs, c.shape(in(c, 0)));
  onnx::NodeProto* pool = nullptr;
  const std::string y =
      c.add(op, {dequantized(c, in(c, 0), params, kChannelsFirst)}, "pool", &pool);
  set_attr(*pool, "kernel_shape", std::vector<int64_t>{window.h.k, window.w.k});
  set_attr(*pool, "strides", std::vector<int64_t>{window.h.stride, window.w.stride});
  set_attr(*pool, "pads", std::vector<int64_t>{window.h.pad_before, window.w.pad_before,
                                               window.h.pad_after, window.w.pad_after});
  quantize_out(c, y, params, kChannelsFirst);
}

void quantized_add(Context& c) {
  const Form form = c.held_form(in(c, 0));
  const Output out_params = in(c, 4);
  const std::string y =
      c.add("Add",
            {dequantized(c, in(c, 0), in(c, 1), form), dequantized(c, in(c, 2), in(c, 3), form)},
            "add");
  const std::string act =
      before_requantize(c, y, activation_of(*c.node), params_value(c, out_params), form);
  quantize_out(c, act, out_params, form);
}

void quantized_concat(Context& c) {
  const int pairs = static_cast<int>(c.node->inputs.size()) / 2;
  const size_t rank = c.node->outputs[0].shape.size();
  bool channels_first = rank == 4;
  for (int i = 0; i < pairs; ++i) channels_first &= c.has_form(in(c, 2 * i), kChannelsFirst);
  const Form form = channels_first ? kChannelsFirst : kAsIs;
  std::vector<std::string> inputs;
  for (int i = 0; i < pairs; ++i)
    inputs.push_back(dequantized(c, in(c, 2 * i), in(c, 2 * i + 1), form));
  onnx::NodeProto* concat = nullptr;
  const std::string y = c.add("Concat", inputs, "concat", &concat);
  set_attr(*concat, "axis", axis_in(form, c.node->attrs.get_int("axis"), rank));
  quantize_out(c, y, c.node->inputs.back(), form);
}

}  // namespace

void add_quantized_writers(WriterMap& m) {
  m["Quantize"] = [](Context& c) {
    const Form form = c.held_form(in(c, 0));
    quantize_out(c, c.get(in(c, 0), form), in(c, 1), form);
  };
  m["Dequantize"] = [](Context& c) {
    const Form form = c.held_form(in(c, 0));
    const QuantNames q = c.quant_params(in(c, 1));
    emit(c, "DequantizeLinear", {c.get(in(c, 0), form), q.scale, q.zero_point}, form);
  };
  m["QuantizedConv2DRequantized"] = quantized_conv;
  m["QuantizedMatMulRequantized"] = quantized_gemm;
  m["QuantizedMaxPool"] = [](Context& c) { quantized_pool(c, "MaxPool"); };
  m["QuantizedAvgPool"] = [](Context& c) { quantized_pool(c, "AveragePool"); };
  m["QuantizedAdd"] = quantized_add;
  m["QuantizedConcat"] = quantized_concat;
}

}  // namespace sf::onnx_export
