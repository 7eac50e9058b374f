// STUB: replaced by the math ops implementation.
#include "ops/register.h"
namespace sf {
void register_math_ops(OpRegistry&) {}
}  // namespace sf
