#include "kernels/register.h"

namespace sf {

void register_builtin_kernels(KernelRegistry& registry) {
  register_reference_kernels(registry);
  register_onednn_kernels(registry);
  register_fused_kernels(registry);
  register_sparse_kernels(registry);
  register_int8_kernels(registry);
  register_image_layout_kernels(registry);
}

}  // namespace sf
