// The hot element loops of the int8 kernels, bit-identical element by element to the scalar
// definitions in codec/quant_params.h (which the reference kernels use), and vectorized
// with AVX-512 where the CPU has it (chosen at run time: the build targets baseline x86-64;
// int8_loops_avx512.h), in portable C++ elsewhere.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/conv_geometry.h"
#include "codec/quant_params.h"

namespace sf {

// int32 accumulators [rows, channels] to u8, one multiplier per channel (requantize_value).
void requantize_rows(const int32_t* acc, int64_t rows, int64_t channels,
                     const std::vector<QuantizedMultiplier>& multipliers, int32_t zero_point,
                     QuantClamp clamp, uint8_t* out);

// out[i] = quantized_add_value(a[i], b[i], p).
void quantized_add_elements(const uint8_t* a, const uint8_t* b, int64_t count,
                            const QuantizedAddParams& p, uint8_t* out);

// out[i] = quantize_value(x[i], p).
void quantize_elements(const float* x, int64_t count, QuantParams p, uint8_t* out);

// out[i] = dequantize_value(q[i], p).
void dequantize_elements(const uint8_t* q, int64_t count, QuantParams p, float* out);

// The smallest and largest finite values of x, widened to include 0 (ChooseQParams' range).
struct FloatRange {
  float lo = 0.0f, hi = 0.0f;
};
FloatRange finite_range(const float* x, int64_t count);

// QuantizedAvgPool of NHWC u8 x [n, g.h.in, g.w.in, channels]: the average of each window's
// in-bounds values, (sum + count / 2) / count.
void average_pool(const uint8_t* x, int64_t n, int64_t channels, const Window2D& g, uint8_t* y);

// QuantizedMaxPool of NHWC u8 x [n, g.h.in, g.w.in, channels]: the largest of each window's
// in-bounds values (0 for a window with none, as the reference).
void max_pool(const uint8_t* x, int64_t n, int64_t channels, const Window2D& g, uint8_t* y);

// One input of a QuantizedConcat: each of its rows, `row` bytes, mapped code by code through
// `table` (256 entries: the input's code to the output's), or copied as it is where `table` is
// null (the input has the output's params).
struct ConcatPart {
  const uint8_t* x;
  int64_t row;
  const uint8_t* table;
};

// QuantizedConcat of `outer` rows: output row r, `y_row` bytes, is each part's row r in turn.
void concat_rows(const std::vector<ConcatPart>& parts, int64_t outer, int64_t y_row, uint8_t* y);

// The per-channel minimum and maximum of int32 accumulators [rows, channels], rows > 0.
void channel_ranges(const int32_t* acc, int64_t rows, int64_t channels, int32_t* lo, int32_t* hi);

}  // namespace sf
