// Builders for the ops with ONNX's quantization semantics (declared in ops/onnx_quant_ops.cc):
// QuantizeLinear / DequantizeLinear (u8 or i8, per tensor or per axis, rounding half to even),
// DynamicQuantizeLinear, and the integer convolutions and matmuls with arbitrary zero points.
// They complement ops/quantized_ops.h, whose ops fix the representation (u8 activations with
// [scale, zero_point] params, symmetric i8 weights) and requantize in fixed point.
#pragma once

#include <string>

#include "graph/graph.h"
#include "ops/ops.h"

namespace sf::ops {

// scale f32 and zero_point (u8 or i8, same shape as scale): one element (per tensor) or 1-D with
// one entry per index of x's `axis` (per axis). The output has zero_point's dtype.
Output quantize_linear(Graph& g, Output x, Output scale, Output zero_point, int64_t axis = 1,
                       const std::string& name = "");
// x u8, i8 or i32 with a zero point of the same dtype; f32 output.
Output dequantize_linear(Graph& g, Output q, Output scale, Output zero_point, int64_t axis = 1,
                         const std::string& name = "");
// Outputs y (u8), y_scale (f32 scalar), y_zero_point (u8 scalar).
Output dynamic_quantize_linear(Graph& g, Output x, const std::string& name = "");

// x [N,H,W,C] u8/i8, w [KH,KW,C/groups,O] u8/i8; x_zero_point one element, w_zero_point one or
// O; i32 output [N,OH,OW,O].
Output conv_integer2d(Graph& g, Output x, Output w, Output x_zero_point, Output w_zero_point,
                      const Conv2DOptions& options = {}, const std::string& name = "");
// a [...,M,K], b [...,K,N] (batch dimensions broadcast); zero points per tensor or per row of a
// ([M]) / per column of b ([N]); i32 output.
Output matmul_integer(Graph& g, Output a, Output b, Output a_zero_point, Output b_zero_point,
                      const std::string& name = "");

// The inputs of QLinearConv2D and QLinearMatMul, in ONNX's order.
struct QLinearInputs {
  Output x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point;
};
// bias: i32 [O] in units of x_scale * w_scale. Output dtype: y_zero_point's.
Output qlinear_conv2d(Graph& g, const QLinearInputs& in, Output bias,
                      const Conv2DOptions& options = {}, const std::string& name = "");
// x = a, w = b.
Output qlinear_matmul(Graph& g, const QLinearInputs& in, const std::string& name = "");

}  // namespace sf::ops
