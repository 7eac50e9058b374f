// Names of built-in ops, for code that looks for an op by name: the declaration and every
// reader use the same constant, so a misspelt name fails to compile instead of never matching.
#pragma once

namespace sf::op_names {

// source_ops.cc
inline constexpr char kConst[] = "Const";

// nn_ops.cc
inline constexpr char kConv2D[] = "Conv2D";
inline constexpr char kMatMul[] = "MatMul";

// fused_ops.cc
inline constexpr char kFusedConv2D[] = "FusedConv2D";
inline constexpr char kFusedConv2DAdd[] = "FusedConv2DAdd";
inline constexpr char kFusedMatMul[] = "FusedMatMul";

// conv_transpose_ops.cc
inline constexpr char kConvTranspose2D[] = "ConvTranspose2D";

// quantized_ops.cc
inline constexpr char kQuantizedConv2D[] = "QuantizedConv2D";
inline constexpr char kQuantizedMatMul[] = "QuantizedMatMul";
inline constexpr char kQuantizedConv2DRequantized[] = "QuantizedConv2DRequantized";
inline constexpr char kQuantizedMatMulRequantized[] = "QuantizedMatMulRequantized";

// onnx_quant_ops.cc
inline constexpr char kConvInteger2D[] = "ConvInteger2D";
inline constexpr char kQLinearConv2D[] = "QLinearConv2D";
inline constexpr char kMatMulInteger[] = "MatMulInteger";
inline constexpr char kQLinearMatMul[] = "QLinearMatMul";

// fake_quant_ops.cc
inline constexpr char kFakeQuantWeights[] = "FakeQuantWeights";

}  // namespace sf::op_names
