#include "kernels/register.h"

#include "kernels/onednn/onednn_common.h"

namespace sf {

void register_onednn_kernels(KernelRegistry& registry) {
  onednn::register_conv_kernels(registry);
  onednn::register_matmul_kernels(registry);
  onednn::register_pool_kernels(registry);
  onednn::register_fused_conv_kernels(registry);
  onednn::register_fused_matmul_kernels(registry);
  onednn::register_transpose_kernels(registry);
  onednn::register_softmax_kernels(registry);
  onednn::register_quantized_kernels(registry);
  onednn::register_rnn_kernels(registry);
}

}  // namespace sf
