// The hot element loops of the int8 kernels, bit-identical element by element to the scalar
// definitions in quantize/quant_params.h (which the reference kernels use), and vectorized
// with AVX-512 when the CPU has it (chosen at run time: the build targets baseline x86-64).
#pragma once

#include <cstdint>
#include <vector>

#include "quantize/quant_params.h"

namespace sf {

// int32 accumulators [rows, channels] to u8, one multiplier per channel (requantize_value).
void requantize_rows(const int32_t* acc, int64_t rows, int64_t channels,
                     const std::vector<QuantizedMultiplier>& multipliers, int32_t zero_point,
                     QuantClamp clamp, uint8_t* out);

// out[i] = quantized_add_value(a[i], b[i], p).
void quantized_add_elements(const uint8_t* a, const uint8_t* b, int64_t count,
                            const QuantizedAddParams& p, uint8_t* out);

}  // namespace sf
