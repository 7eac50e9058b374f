// STUB: replaced by the norm ops implementation.
#include "ops/register.h"
namespace sf {
void register_norm_ops(OpRegistry&) {}
}  // namespace sf
