// STUB: replaced by the norm reference kernels.
#include "kernels/reference/reference.h"
namespace sf {
void register_reference_norm_kernels(KernelRegistry&) {}
}  // namespace sf
