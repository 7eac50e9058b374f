// The explicit list of built-in ops.
#pragma once

#include <vector>

namespace sf {

class OpRegistry;
struct GradContext;
struct Output;
void register_builtin_ops(OpRegistry& registry);

// One function per op family, each defined in its family's file.
void register_source_ops(OpRegistry& registry);
void register_array_ops(OpRegistry& registry);
void register_math_ops(OpRegistry& registry);
void register_activation_ops(OpRegistry& registry);
void register_loss_ops(OpRegistry& registry);
void register_norm_ops(OpRegistry& registry);
void register_nn_ops(OpRegistry& registry);
void register_layout_ops(OpRegistry& registry);
void register_pointwise_ops(OpRegistry& registry);
void register_logic_ops(OpRegistry& registry);
void register_resize_ops(OpRegistry& registry);
void register_conv_transpose_ops(OpRegistry& registry);
void register_fused_ops(OpRegistry& registry);  // after nn ops: reuses their attributes
void register_quantized_ops(OpRegistry& registry);  // after nn ops: reuses their attributes
void register_onnx_quant_ops(OpRegistry& registry);  // after nn ops: reuses their attributes
void register_fake_quant_ops(OpRegistry& registry);
void register_binary_ops(OpRegistry& registry);
void register_rnn_ops(OpRegistry& registry);

// The gradient of the fused ops only imported inference graphs hold (LayerNorm, Gelu): an error
// naming the node (norm_ops.cc).
std::vector<Output> inference_only_gradient(GradContext& ctx);

}  // namespace sf
