// STUB: replaced by the array reference kernels.
#include "kernels/reference/reference.h"
namespace sf {
void register_reference_array_kernels(KernelRegistry&) {}
}  // namespace sf
