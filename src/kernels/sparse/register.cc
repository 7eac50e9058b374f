#include "kernels/register.h"

#include "kernels/sparse/sparse_kernels.h"

namespace sf {

void register_sparse_kernels(KernelRegistry& registry) {
  sparse::register_matmul_kernels(registry);
  sparse::register_conv_kernels(registry);
  sparse::register_int8_matmul_kernels(registry);
  sparse::register_int8_conv_kernels(registry);
}

}  // namespace sf
