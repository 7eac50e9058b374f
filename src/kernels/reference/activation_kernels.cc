// STUB: replaced by the activation reference kernels.
#include "kernels/reference/reference.h"
namespace sf {
void register_reference_activation_kernels(KernelRegistry&) {}
}  // namespace sf
