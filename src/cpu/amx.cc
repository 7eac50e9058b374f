#include "cpu/amx.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpu/cpu_features.h"

namespace sf {

bool amx_permitted() {
  static const bool permitted = [] {
    if (!cpu_features().amx_bf16 && !cpu_features().amx_int8) return false;
#if defined(__x86_64__) && defined(__linux__)
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return permitted;
}

}  // namespace sf
