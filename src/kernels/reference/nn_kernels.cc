// STUB: replaced by the nn reference kernels.
#include "kernels/reference/reference.h"
namespace sf {
void register_reference_nn_kernels(KernelRegistry&) {}
}  // namespace sf
