#include "kernels/reference/reference.h"
#include "kernels/register.h"

namespace sf {

void register_reference_kernels(KernelRegistry& registry) {
  register_reference_array_kernels(registry);
  register_reference_math_kernels(registry);
  register_reference_activation_kernels(registry);
  register_reference_loss_kernels(registry);
  register_reference_norm_kernels(registry);
  register_reference_nn_kernels(registry);
  register_reference_layout_kernels(registry);
  register_reference_pointwise_kernels(registry);
  register_reference_logic_kernels(registry);
  register_reference_resize_kernels(registry);
  register_reference_conv_transpose_kernels(registry);
  register_reference_quantized_kernels(registry);
  register_reference_onnx_quant_kernels(registry);
  register_reference_fake_quant_kernels(registry);
  register_reference_binary_kernels(registry);
  register_reference_rnn_kernels(registry);
}

}  // namespace sf
