// STUB: replaced by the nn ops implementation.
#include "ops/register.h"
namespace sf {
void register_nn_ops(OpRegistry&) {}
}  // namespace sf
