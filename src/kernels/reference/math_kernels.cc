// STUB: replaced by the math reference kernels.
#include "kernels/reference/reference.h"
namespace sf {
void register_reference_math_kernels(KernelRegistry&) {}
}  // namespace sf
