// The arithmetic a session's convolutions and matrix products run in. fp32 everywhere by
// default; bf16 hands the float layers' products to oneDNN's bf16 kernels (inputs and weights
// rounded to bf16, accumulation and outputs in fp32), layer by layer where such a kernel exists,
// the others staying fp32.
#pragma once

#include <string>

namespace sf {

enum class Precision { fp32, bf16 };

struct PrecisionChoice {
  Precision precision = Precision::fp32;
  std::string reason;  // why, for --json and the run's log
};

// "fp32", "bf16" or "auto" (bf16 where the CPU has AMX, fp32 elsewhere), or an error naming
// `what` (the flag).
PrecisionChoice choose_precision(const std::string& requested, const std::string& what);

const char* precision_name(Precision precision);

}  // namespace sf
