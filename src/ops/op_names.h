// Names of built-in ops, for code that looks for an op by name: the declaration and every
// reader use the same constant, so a misspelt name fails to compile instead of never matching.
#pragma once

namespace sf::op_names {

// source_ops.cc
inline constexpr char kPlaceholder[] = "Placeholder";
inline constexpr char kVariable[] = "Variable";
inline constexpr char kConst[] = "Const";
// The consumer's side of a cross-device edge in a partitioned graph (placement/partition.h).
inline constexpr char kRecv[] = "Recv";

// array_ops.cc
inline constexpr char kIdentity[] = "Identity";
inline constexpr char kReshape[] = "Reshape";
inline constexpr char kFlatten[] = "Flatten";
inline constexpr char kConcat[] = "Concat";
inline constexpr char kSlice[] = "Slice";
inline constexpr char kCast[] = "Cast";

// rnn_ops.cc
inline constexpr char kGru[] = "Gru";
inline constexpr char kLstm[] = "Lstm";
inline constexpr char kGruGrad[] = "GruGrad";
inline constexpr char kLstmGrad[] = "LstmGrad";

// math_ops.cc
inline constexpr char kAdd[] = "Add";
inline constexpr char kSub[] = "Sub";
inline constexpr char kMul[] = "Mul";
inline constexpr char kDiv[] = "Div";
inline constexpr char kMaximum[] = "Maximum";
inline constexpr char kMinimum[] = "Minimum";
inline constexpr char kMaximumGrad[] = "MaximumGrad";
inline constexpr char kMinimumGrad[] = "MinimumGrad";
inline constexpr char kRound[] = "Round";
inline constexpr char kNeg[] = "Neg";
inline constexpr char kAddN[] = "AddN";
inline constexpr char kSumTo[] = "SumTo";
inline constexpr char kBroadcastTo[] = "BroadcastTo";
inline constexpr char kReduceSum[] = "ReduceSum";
inline constexpr char kReduceMean[] = "ReduceMean";
inline constexpr char kReduceMax[] = "ReduceMax";
inline constexpr char kReduceMin[] = "ReduceMin";
inline constexpr char kReduceExtremumGrad[] = "ReduceExtremumGrad";
inline constexpr char kReduceMeanGrad[] = "ReduceMeanGrad";

// activation_ops.cc
inline constexpr char kRelu[] = "Relu";
inline constexpr char kReluGrad[] = "ReluGrad";
inline constexpr char kRelu6[] = "Relu6";
inline constexpr char kRelu6Grad[] = "Relu6Grad";
inline constexpr char kSigmoid[] = "Sigmoid";
inline constexpr char kSigmoidGrad[] = "SigmoidGrad";
inline constexpr char kTanh[] = "Tanh";
inline constexpr char kTanhGrad[] = "TanhGrad";
inline constexpr char kSoftmax[] = "Softmax";
inline constexpr char kSoftmaxGrad[] = "SoftmaxGrad";

// loss_ops.cc
inline constexpr char kSoftmaxCrossEntropy[] = "SoftmaxCrossEntropy";
inline constexpr char kSoftmaxCrossEntropyGrad[] = "SoftmaxCrossEntropyGrad";

// norm_ops.cc
inline constexpr char kBatchNorm[] = "BatchNorm";
inline constexpr char kBatchNormGrad[] = "BatchNormGrad";
// BatchNorm with its Relu or Relu6 applied (attribute "activation"): made by the training
// passes, after the gradients exist, so it has no gradient of its own.
inline constexpr char kFusedBatchNorm[] = "FusedBatchNorm";
// BatchNormGrad of the ReluGrad or Relu6Grad (attribute "activation") that produced its dy: made
// by the training passes.
inline constexpr char kFusedBatchNormGrad[] = "FusedBatchNormGrad";
inline constexpr char kLayerNorm[] = "LayerNorm";
inline constexpr char kDropout[] = "Dropout";

// nn_ops.cc
inline constexpr char kConv2D[] = "Conv2D";
inline constexpr char kConv2DBackpropInput[] = "Conv2DBackpropInput";
inline constexpr char kConv2DBackpropFilter[] = "Conv2DBackpropFilter";
inline constexpr char kMatMul[] = "MatMul";
inline constexpr char kBatchMatMul[] = "BatchMatMul";
inline constexpr char kBiasAdd[] = "BiasAdd";
inline constexpr char kBiasAddGrad[] = "BiasAddGrad";
inline constexpr char kBiasAddRelu[] = "BiasAddRelu";
inline constexpr char kMaxPool[] = "MaxPool";
inline constexpr char kMaxPoolGrad[] = "MaxPoolGrad";
inline constexpr char kMaxPoolWithArgmax[] = "MaxPoolWithArgmax";
inline constexpr char kMaxPoolWindowArgmax[] = "MaxPoolWindowArgmax";
inline constexpr char kMaxPoolGradWindowArgmax[] = "MaxPoolGradWindowArgmax";
inline constexpr char kAvgPool[] = "AvgPool";
inline constexpr char kAvgPoolGrad[] = "AvgPoolGrad";
inline constexpr char kGlobalAvgPool[] = "GlobalAvgPool";
inline constexpr char kGlobalAvgPoolGrad[] = "GlobalAvgPoolGrad";

// layout_ops.cc
inline constexpr char kTranspose[] = "Transpose";
inline constexpr char kPad[] = "Pad";
inline constexpr char kStridedSlice[] = "StridedSlice";
inline constexpr char kGather[] = "Gather";
inline constexpr char kStridedSliceGrad[] = "StridedSliceGrad";
inline constexpr char kGatherGrad[] = "GatherGrad";

// pointwise_ops.cc
inline constexpr char kPow[] = "Pow";
inline constexpr char kSqrt[] = "Sqrt";
inline constexpr char kExp[] = "Exp";
inline constexpr char kLog[] = "Log";
inline constexpr char kErf[] = "Erf";
inline constexpr char kGelu[] = "Gelu";
inline constexpr char kClip[] = "Clip";
inline constexpr char kClipGrad[] = "ClipGrad";
inline constexpr char kLeakyRelu[] = "LeakyRelu";
inline constexpr char kLeakyReluGrad[] = "LeakyReluGrad";
inline constexpr char kHardSigmoid[] = "HardSigmoid";
inline constexpr char kHardSigmoidGrad[] = "HardSigmoidGrad";
inline constexpr char kHardSwish[] = "HardSwish";
inline constexpr char kHardSwishGrad[] = "HardSwishGrad";
inline constexpr char kPRelu[] = "PRelu";
inline constexpr char kPReluGrad[] = "PReluGrad";

// logic_ops.cc
inline constexpr char kEqual[] = "Equal";
inline constexpr char kLess[] = "Less";
inline constexpr char kGreater[] = "Greater";
inline constexpr char kLessOrEqual[] = "LessOrEqual";
inline constexpr char kGreaterOrEqual[] = "GreaterOrEqual";
inline constexpr char kAnd[] = "And";
inline constexpr char kOr[] = "Or";
inline constexpr char kXor[] = "Xor";
inline constexpr char kNot[] = "Not";
inline constexpr char kWhere[] = "Where";

// resize_ops.cc
inline constexpr char kResize[] = "Resize";
inline constexpr char kResizeGrad[] = "ResizeGrad";

// conv_transpose_ops.cc
inline constexpr char kConvTranspose2D[] = "ConvTranspose2D";

// fused_ops.cc
inline constexpr char kFusedConv2D[] = "FusedConv2D";
inline constexpr char kFusedConv2DAdd[] = "FusedConv2DAdd";
inline constexpr char kFusedConv2DMaxPool[] = "FusedConv2DMaxPool";
inline constexpr char kFusedConv2DMaxPoolGrad[] = "FusedConv2DMaxPoolGrad";
inline constexpr char kFusedMatMul[] = "FusedMatMul";

// quantized_ops.cc
inline constexpr char kChooseQParams[] = "ChooseQParams";
inline constexpr char kQuantize[] = "Quantize";
inline constexpr char kDequantize[] = "Dequantize";
inline constexpr char kQuantizedConv2D[] = "QuantizedConv2D";
inline constexpr char kQuantizedMatMul[] = "QuantizedMatMul";
inline constexpr char kRequantizationRange[] = "RequantizationRange";
inline constexpr char kRequantize[] = "Requantize";
inline constexpr char kQuantizedConv2DRequantized[] = "QuantizedConv2DRequantized";
inline constexpr char kQuantizedMatMulRequantized[] = "QuantizedMatMulRequantized";
inline constexpr char kQuantizedMaxPool[] = "QuantizedMaxPool";
inline constexpr char kQuantizedAvgPool[] = "QuantizedAvgPool";
inline constexpr char kQuantizedAdd[] = "QuantizedAdd";
inline constexpr char kQuantizedConcat[] = "QuantizedConcat";

// onnx_quant_ops.cc
inline constexpr char kQuantizeLinear[] = "QuantizeLinear";
inline constexpr char kDequantizeLinear[] = "DequantizeLinear";
inline constexpr char kDynamicQuantizeLinear[] = "DynamicQuantizeLinear";
inline constexpr char kConvInteger2D[] = "ConvInteger2D";
inline constexpr char kQLinearConv2D[] = "QLinearConv2D";
inline constexpr char kMatMulInteger[] = "MatMulInteger";
inline constexpr char kQLinearMatMul[] = "QLinearMatMul";

// fake_quant_ops.cc
inline constexpr char kFakeQuantWeights[] = "FakeQuantWeights";
inline constexpr char kFakeQuantActivation[] = "FakeQuantActivation";
inline constexpr char kFakeQuantActivationGrad[] = "FakeQuantActivationGrad";

// binary_ops.cc
inline constexpr char kBinarizeWeights[] = "BinarizeWeights";
inline constexpr char kBinarizeActivation[] = "BinarizeActivation";
inline constexpr char kStraightThroughGrad[] = "StraightThroughGrad";

}  // namespace sf::op_names
