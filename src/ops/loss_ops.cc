// STUB: replaced by the loss ops implementation.
#include "ops/register.h"
namespace sf {
void register_loss_ops(OpRegistry&) {}
}  // namespace sf
