// Converters for ONNX's quantization ops: QuantizeLinear, DequantizeLinear (per tensor or per
// axis, u8 or i8), DynamicQuantizeLinear, ConvInteger, MatMulInteger, QLinearConv and
// QLinearMatMul. Each maps to the engine op of the same semantics (ops/onnx_quant_ops.h); the
// image ops run NHWC with HWIO filters like Conv. Scales and zero points are checked here so
// that a malformed model fails naming its node and the ONNX input names.
//
// QDQ models (DequantizeLinear -> float op -> QuantizeLinear) are turned into the engine's
// integer ops before these converters see them (qdq_fusion.cc); what is left runs as written.
#include "onnx/context.h"
#include "ops/op_names.h"

namespace sf::onnx_import {

Tensor dequantize_tensor(const Tensor& q, const Tensor& scale, const Tensor& zero_point,
                         int64_t axis) {
  const std::vector<int64_t> values = to_ints(q), zero = to_ints(zero_point);
  const std::vector<float> scales = to_floats(scale);
  int64_t inner = 1, extent = 1;
  if (scales.size() > 1) {
    extent = q.shape()[static_cast<size_t>(axis)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < q.shape().size(); ++d) inner *= q.shape()[d];
  }
  Tensor y(DType::f32, q.shape());
  float* yp = y.data<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    const size_t c = static_cast<size_t>(static_cast<int64_t>(i) / inner % extent);
    yp[i] = static_cast<float>(values[i] - zero[c]) * scales[c];
  }
  return y;
}

namespace {

Layout layout_of(const Value& v) { return v.is_nhwc() ? Layout::kNhwc : Layout::kPlain; }

// Position of NCHW axis `a` in the NHWC form.
int64_t nhwc_axis(int64_t a) { return kToNchw[static_cast<size_t>(a)]; }

bool is_8bit(DType d) { return d == DType::u8 || d == DType::i8; }

bool holds_one_value(const Shape& s) { return s.size() <= 1 && num_elements(s) == 1; }

Tensor zeros(DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  t.fill_zero();
  return t;
}

Value& eight_bit_in(Context& c, int i, const char* name) {
  Value& v = c.in(i);
  if (!is_8bit(v.dtype)) c.fail("{} must be uint8 or int8, got {}", name, dtype_name(v.dtype));
  return v;
}

// A scale input: f32 holding one value, or (when count > 0) one per `per`.
Output scale_in(Context& c, int i, const char* name, int64_t count, const char* per) {
  Value& s = c.in(i);
  if (s.dtype != DType::f32) c.fail("{} must be float, got {}", name, dtype_name(s.dtype));
  if (!holds_one_value(s.shape) && !(count > 0 && s.shape == Shape{count})) {
    if (count > 0)
      c.fail("{} has shape {}; expected one value or [{}] (one per {})", name, shape_str(s.shape),
             count, per);
    c.fail("{} has shape {}; expected one value (per tensor)", name, shape_str(s.shape));
  }
  return c.plain(s);
}

// Zero point input i of value `of` (same dtype), holding one value or (count > 0) one per
// `per`; zeros when the input is absent.
Output zero_point_in(Context& c, int i, const char* name, const Value& of, const char* of_name,
                     int64_t count, const char* per) {
  if (!c.has_input(i)) return c.constant(zeros(of.dtype, {}), name);
  Value& z = c.in(i);
  if (z.dtype != of.dtype)
    c.fail("{} is {} but {} is {}: they must have the same type", name, dtype_name(z.dtype),
           of_name, dtype_name(of.dtype));
  if (!holds_one_value(z.shape) && !(count > 0 && z.shape == Shape{count})) {
    if (count > 0)
      c.fail("{} has shape {}; expected one value or [{}] (one per {})", name, shape_str(z.shape),
             count, per);
    c.fail("{} has shape {}; expected one value (per tensor)", name, shape_str(z.shape));
  }
  return c.plain(z);
}

// QuantizeLinear (quantize) and DequantizeLinear: y = saturate(round(x / scale) + zero_point)
// and y = (x - zero_point) * scale, per tensor or (opset 13) along `axis`. A dequantization of
// constants (weights, biases left float) is folded.
void linear_quantization(Context& c, bool quantize) {
  const char* scale_name = quantize ? "y_scale" : "x_scale";
  const char* zero_name = quantize ? "y_zero_point" : "x_zero_point";
  Value& x = c.in(0);
  if (quantize && x.dtype != DType::f32)
    c.unsupported("x is {}; only float inputs are supported", dtype_name(x.dtype));
  if (!quantize && !is_8bit(x.dtype) && x.dtype != DType::i32)
    c.fail("x must be uint8, int8 or int32, got {}", dtype_name(x.dtype));
  Value& scale = c.in(1);
  if (scale.dtype != DType::f32)
    c.fail("{} must be float, got {}", scale_name, dtype_name(scale.dtype));
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t axis = c.attr_int("axis", 1);
  if (!holds_one_value(scale.shape)) {
    if (c.opset < 13)
      c.fail("{} {} must hold one value (per-axis scales need opset 13)", scale_name,
             shape_str(scale.shape));
    if (axis < -rank || axis >= rank)
      c.fail("axis {} is out of range for x {} (rank {})", axis, shape_str(x.shape), rank);
    if (axis < 0) axis += rank;
    if (scale.shape != Shape{x.shape[static_cast<size_t>(axis)]})
      c.fail("{} has shape {}; expected one value or [{}] (one per index of axis {} of x {})",
             scale_name, shape_str(scale.shape), x.shape[static_cast<size_t>(axis)], axis,
             shape_str(x.shape));
  }
  if (c.has_input(2)) {
    const Value& z = c.in(2);
    if (quantize && !is_8bit(z.dtype))
      c.fail("{} must be uint8 or int8, got {}", zero_name, dtype_name(z.dtype));
    if (!quantize && z.dtype != x.dtype)
      c.fail("{} is {} but x is {}: they must have the same type", zero_name, dtype_name(z.dtype),
             dtype_name(x.dtype));
    if (num_elements(z.shape) != num_elements(scale.shape) || z.shape.size() > 1)
      c.fail("{} has shape {} but {} has shape {}: they must match", zero_name, shape_str(z.shape),
             scale_name, shape_str(scale.shape));
  }
  const DType zero_dtype = quantize ? DType::u8 : x.dtype;  // ONNX's default: uint8
  if (!quantize && x.is_const() && scale.is_const() && (!c.has_input(2) || c.in(2).is_const())) {
    const Tensor zero = c.has_input(2) ? *c.in(2).constant : zeros(zero_dtype, scale.shape);
    return c.set_const(0, dequantize_tensor(*x.constant, *scale.constant, zero, axis));
  }
  const Output zero_point =
      c.has_input(2) ? c.plain(c.in(2)) : c.constant(zeros(zero_dtype, scale.shape), zero_name);
  const Layout l = rank == 4 ? layout_of(x) : Layout::kPlain;
  const int64_t op_axis = l == Layout::kNhwc && axis >= 0 && axis < 4 ? nhwc_axis(axis) : axis;
  const Output y = c.add(quantize ? op_names::kQuantizeLinear : op_names::kDequantizeLinear,
                         {c.get(x, l), c.plain(scale), zero_point}, {{"axis", op_axis}});
  c.set_out(0, y, l);
}

void dynamic_quantize_linear(Context& c) {
  Value& x = c.in(0);
  if (x.dtype != DType::f32) c.fail("x must be float, got {}", dtype_name(x.dtype));
  const Layout l = x.shape.size() == 4 ? layout_of(x) : Layout::kPlain;
  const Output y = c.add(op_names::kDynamicQuantizeLinear, {c.get(x, l)});
  c.set_out(0, y, l);
  c.set_out(1, Output{y.node, 1}, Layout::kPlain);
  c.set_out(2, Output{y.node, 2}, Layout::kPlain);
}

Value& image_in(Context& c, int i, const char* name) {
  Value& x = eight_bit_in(c, i, name);
  if (x.shape.size() != 4)
    c.unsupported("only 2-D images (4-D NCHW {}) are supported, got {}", name, shape_str(x.shape));
  return x;
}

int64_t output_channels(Context& c, const Value& w) {
  if (w.shape.size() != 4)
    c.unsupported("only 2-D filters are supported, got {}", shape_str(w.shape));
  return w.shape[0];
}

// ConvInteger(x, w, x_zero_point, w_zero_point): i32 sums of (x - x_zp) * (w - w_zp).
void conv_integer(Context& c) {
  Value& x = image_in(c, 0, "x");
  Value& w = eight_bit_in(c, 1, "w");
  const int64_t channels = output_channels(c, w);
  const Output x_zero = zero_point_in(c, 2, "x_zero_point", x, "x", 0, "");
  const Output w_zero = zero_point_in(c, 3, "w_zero_point", w, "w", channels, "output channel");
  const Attrs a = conv2d_attrs(c, x.shape, w.shape);
  const Output y =
      c.add(op_names::kConvInteger2D, {c.nhwc(x), conv_filter(c, w), x_zero, w_zero}, a);
  c.set_out(0, y, Layout::kNhwc);
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B).
void qlinear_conv(Context& c) {
  Value& x = image_in(c, 0, "x");
  Value& w = eight_bit_in(c, 3, "w");
  const int64_t channels = output_channels(c, w);
  const char* per = "output channel";
  Output bias;
  if (c.has_input(8)) {
    Value& b = c.in(8);
    if (b.dtype != DType::i32 || b.shape != Shape{channels})
      c.fail("B must be int32 [{}] (one per output channel), got {} {}", channels,
             dtype_name(b.dtype), shape_str(b.shape));
    bias = c.plain(b);
  } else {
    bias = c.constant(zeros(DType::i32, {channels}), "B");
  }
  const Value& y_zero = eight_bit_in(c, 7, "y_zero_point");
  const std::vector<Output> in{c.nhwc(x),
                               scale_in(c, 1, "x_scale", 0, ""),
                               zero_point_in(c, 2, "x_zero_point", x, "x", 0, ""),
                               conv_filter(c, w),
                               scale_in(c, 4, "w_scale", channels, per),
                               zero_point_in(c, 5, "w_zero_point", w, "w", channels, per),
                               scale_in(c, 6, "y_scale", 0, ""),
                               zero_point_in(c, 7, "y_zero_point", y_zero, "y_zero_point", 0, ""),
                               bias};
  c.set_out(0, c.add(op_names::kQLinearConv2D, in, conv2d_attrs(c, x.shape, w.shape)),
            Layout::kNhwc);
}

// A [...,M,K] and B [...,K,N] of MatMulInteger / QLinearMatMul: rows M, columns N.
std::pair<int64_t, int64_t> matmul_dims(Context& c, const Value& a, const Value& b) {
  if (a.shape.size() < 2 || b.shape.size() < 2)
    c.unsupported("only inputs of rank 2 or more are supported, got {} and {}", shape_str(a.shape),
                  shape_str(b.shape));
  return {a.shape[a.shape.size() - 2], b.shape.back()};
}

void matmul_integer(Context& c) {
  Value& a = eight_bit_in(c, 0, "A");
  Value& b = eight_bit_in(c, 1, "B");
  const auto [rows, columns] = matmul_dims(c, a, b);
  const Output a_zero = zero_point_in(c, 2, "a_zero_point", a, "A", rows, "row of A");
  const Output b_zero = zero_point_in(c, 3, "b_zero_point", b, "B", columns, "column of B");
  c.set_out(0, c.add(op_names::kMatMulInteger, {c.plain(a), c.plain(b), a_zero, b_zero}),
            Layout::kPlain);
}

void qlinear_matmul(Context& c) {
  Value& a = eight_bit_in(c, 0, "a");
  Value& b = eight_bit_in(c, 3, "b");
  const auto [rows, columns] = matmul_dims(c, a, b);
  const Value& y_zero = eight_bit_in(c, 7, "y_zero_point");
  const std::vector<Output> in{c.plain(a),
                               scale_in(c, 1, "a_scale", rows, "row of a"),
                               zero_point_in(c, 2, "a_zero_point", a, "a", rows, "row of a"),
                               c.plain(b),
                               scale_in(c, 4, "b_scale", columns, "column of b"),
                               zero_point_in(c, 5, "b_zero_point", b, "b", columns, "column of b"),
                               scale_in(c, 6, "y_scale", 0, ""),
                               zero_point_in(c, 7, "y_zero_point", y_zero, "y_zero_point", 0, "")};
  c.set_out(0, c.add(op_names::kQLinearMatMul, in), Layout::kPlain);
}

}  // namespace

void add_quant_converters(ConverterMap& m) {
  m["QuantizeLinear"] = [](Context& c) { linear_quantization(c, true); };
  m["DequantizeLinear"] = [](Context& c) { linear_quantization(c, false); };
  m["DynamicQuantizeLinear"] = dynamic_quantize_linear;
  m["ConvInteger"] = conv_integer;
  m["QLinearConv"] = qlinear_conv;
  m["MatMulInteger"] = matmul_integer;
  m["QLinearMatMul"] = qlinear_matmul;
}

}  // namespace sf::onnx_import
