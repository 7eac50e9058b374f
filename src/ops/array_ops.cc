// STUB: replaced by the array ops implementation.
#include "ops/register.h"
namespace sf {
void register_array_ops(OpRegistry&) {}
}  // namespace sf
