// STUB: replaced by the activation ops implementation.
#include "ops/register.h"
namespace sf {
void register_activation_ops(OpRegistry&) {}
}  // namespace sf
