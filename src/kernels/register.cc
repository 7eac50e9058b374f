#include "kernels/register.h"

namespace sf {

void register_builtin_kernels(KernelRegistry& registry) {
  register_reference_kernels(registry);
  register_onednn_kernels(registry);
  register_fused_kernels(registry);
  register_sparse_kernels(registry);
  register_int8_kernels(registry);
  register_float_loop_kernels(registry);
  register_binary_kernels(registry);
  register_slice_kernels(registry);
  register_transformer_kernels(registry);
#if defined(__x86_64__)
  register_image_layout_kernels(registry);
  register_transformer_kernels_avx512(registry);
  register_amx_filter_grad_kernel(registry);
  register_amx_weight_grad_kernel(registry);
#endif
}

}  // namespace sf
