#include "ops/register.h"

#include "graph/op_registry.h"

namespace sf {

void register_builtin_ops(OpRegistry& registry) {
  register_source_ops(registry);
  register_array_ops(registry);
  register_math_ops(registry);
  register_activation_ops(registry);
  register_loss_ops(registry);
  register_norm_ops(registry);
  register_nn_ops(registry);
  register_layout_ops(registry);
  register_pointwise_ops(registry);
  register_logic_ops(registry);
  register_resize_ops(registry);
  register_conv_transpose_ops(registry);
  register_fused_ops(registry);
  register_quantized_ops(registry);
  register_onnx_quant_ops(registry);
  register_fake_quant_ops(registry);
  register_binary_ops(registry);
  register_rnn_ops(registry);
}

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    register_builtin_ops(*r);
    return r;
  }();
  return *registry;
}

}  // namespace sf
