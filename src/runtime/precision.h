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

// What bf16 runs on here: AMX tiles, AVX-512 BF16, or oneDNN's emulation (slower than fp32).
std::string bf16_hardware();

// Model-file metadata written by `quantize --mode bf16` (runtime/model_to_run.h reads it): the
// precision the model runs in unless a command asks for another, and the layers kept in fp32
// (a JSON array of node names, from --exclude).
inline constexpr const char* kPrecisionMetadataKey = "precision";
inline constexpr const char* kFp32LayersMetadataKey = "fp32_layers";

const char* precision_name(Precision precision);

}  // namespace sf
