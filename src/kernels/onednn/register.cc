// STUB: replaced by the oneDNN kernels.
#include "kernels/register.h"
namespace sf {
void register_onednn_kernels(KernelRegistry&) {}
}  // namespace sf
