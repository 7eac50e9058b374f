#include "runtime/precision.h"

#include "core/error.h"
#include "cpu/cpu_features.h"

namespace sf {

PrecisionChoice choose_precision(const std::string& requested, const std::string& what) {
  if (requested == "fp32") return {Precision::fp32, "requested"};
  if (requested == "bf16") return {Precision::bf16, "requested; " + bf16_hardware()};
  if (requested == "auto")
    return cpu_features().amx_bf16
               ? PrecisionChoice{Precision::bf16, "auto: the CPU has AMX bf16"}
               : PrecisionChoice{Precision::fp32, "auto: no AMX bf16 on this CPU"};
  fail("{} '{}': expected fp32, bf16 or auto", what, requested);
}

std::string bf16_hardware() {
  const CpuFeatures& cpu = cpu_features();
  return cpu.amx_bf16      ? "AMX bf16 tiles"
         : cpu.avx512_bf16 ? "AVX-512 BF16 (no AMX)"
                           : "no bf16 instructions: oneDNN emulates bf16, slower than fp32";
}

const char* precision_name(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp32";
}

}  // namespace sf
