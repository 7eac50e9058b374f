// Fixed-point requantization, bit-exact with gemmlowp / TFLite: a positive real multiplier is
// held as an int32 in [2^30, 2^31) times a power of two, and applied to int32 accumulators with
// SaturatingRoundingDoublingHighMul followed by RoundingDivideByPOT. Integer kernels use this
// instead of float multiplies so that every implementation produces the same bytes.
#pragma once

#include <cstdint>
#include <limits>

namespace sf {

// real ≈ multiplier * 2^(shift - 31).
struct QuantizedMultiplier {
  int32_t multiplier = 0;  // in [2^30, 2^31), or 0 for reals too small to matter (< 2^-62)
  int shift = 0;           // in [-62, 32]; positive shifts left before the multiply
};

// Throws sf::Error unless 0 < real < 2^31 and finite.
QuantizedMultiplier quantize_multiplier(double real);

// The high 32 bits of 2*a*b, rounded to nearest with ties upwards (gemmlowp's nudge, then a
// truncating division); saturates the one overflowing case a == b == INT32_MIN.
inline int32_t saturating_rounding_doubling_high_mul(int32_t a, int32_t b) {
  if (a == b && a == std::numeric_limits<int32_t>::min())
    return std::numeric_limits<int32_t>::max();
  const int64_t ab = static_cast<int64_t>(a) * b;
  const int64_t nudge = ab >= 0 ? (int64_t{1} << 30) : (1 - (int64_t{1} << 30));
  // Division (not a shift) truncates towards zero: with the nudge that is gemmlowp's rounding.
  // The result fits in int32 once the single overflow case is excluded.
  return static_cast<int32_t>((ab + nudge) / (int64_t{1} << 31));
}

// x / 2^exponent rounded to nearest, ties away from zero; exponent in [0, 62] (computed in 64
// bits, so exponents of 32 and more are defined and round everything to 0 or ±1).
inline int32_t rounding_divide_by_pot(int32_t x, int exponent) {
  const int64_t mask = (int64_t{1} << exponent) - 1;
  const int64_t wide = x;
  const int64_t remainder = wide & mask;
  const int64_t threshold = (mask >> 1) + (wide < 0 ? 1 : 0);
  return static_cast<int32_t>((wide >> exponent) + (remainder > threshold ? 1 : 0));
}

// x * 2^shift saturated to int32 (shift >= 0).
inline int32_t saturating_left_shift(int32_t x, int shift) {
  const int64_t wide = static_cast<int64_t>(x) * (int64_t{1} << shift);
  if (wide > std::numeric_limits<int32_t>::max()) return std::numeric_limits<int32_t>::max();
  if (wide < std::numeric_limits<int32_t>::min()) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(wide);
}

// round(x * real) for the real that m holds (TFLite's MultiplyByQuantizedMultiplier; a left
// shift saturates instead of overflowing).
inline int32_t multiply_by_quantized_multiplier(int32_t x, QuantizedMultiplier m) {
  const int left = m.shift > 0 ? m.shift : 0;
  const int right = m.shift > 0 ? 0 : -m.shift;
  return rounding_divide_by_pot(
      saturating_rounding_doubling_high_mul(saturating_left_shift(x, left), m.multiplier), right);
}

}  // namespace sf
