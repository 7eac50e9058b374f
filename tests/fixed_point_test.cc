// Fixed-point requantization against the same rounding computed with 128-bit integers, on
// random values and the int32 extremes.
#include "codec/fixed_point.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/int8_loops.h"
#include "codec/quant_params.h"

namespace sf::SLIMFLOW_TEST_FILE_ID {
namespace {

__extension__ typedef __int128 int128;

constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();

// floor(a / b) for b > 0.
int128 floor_div(int128 a, int128 b) {
  int128 q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}

int128 clamp_i32(int128 v) { return v < kMin ? kMin : v > kMax ? kMax : v; }

// x * multiplier * 2^(shift - 31), specified directly: saturating left shift, then
// 2*x*M / 2^32 rounded half up (saturated), then / 2^right rounded half away from zero.
int32_t wide_multiply(int32_t x, QuantizedMultiplier m) {
  const int left = m.shift > 0 ? m.shift : 0;
  const int right = m.shift > 0 ? 0 : -m.shift;
  const int128 shifted = clamp_i32(int128{x} * (int128{1} << left));
  const int128 two32 = int128{1} << 32;
  const int128 high = clamp_i32(floor_div(2 * shifted * m.multiplier + two32 / 2, two32));
  if (right == 0) return static_cast<int32_t>(high);
  const int128 divisor = int128{1} << right;
  const int128 magnitude = floor_div((high < 0 ? -high : high) + divisor / 2, divisor);
  return static_cast<int32_t>(high < 0 ? -magnitude : magnitude);
}

std::vector<int32_t> interesting_values(std::mt19937& rng, int random_count) {
  std::vector<int32_t> v = {kMin, kMin + 1, -65536, -32768, -257, -255, -2, -1, 0, 1, 2,
                            255,  257,      32767,  65536,  kMax - 1, kMax};
  std::uniform_int_distribution<int32_t> any(kMin, kMax);
  std::uniform_int_distribution<int32_t> small(-100000, 100000);
  for (int i = 0; i < random_count; ++i) v.push_back(i % 2 ? any(rng) : small(rng));
  return v;
}

TEST(FixedPoint, QuantizeMultiplierRepresentsTheReal) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> exponent(-40.0, 30.9);
  std::vector<double> reals = {1e-9, 0.5, 1.0, 0.999999999, 1.5, 2147483647.0};
  for (int i = 0; i < 2000; ++i) reals.push_back(std::exp2(exponent(rng)));
  for (double real : reals) {
    SCOPED_TRACE(real);
    const QuantizedMultiplier m = quantize_multiplier(real);
    EXPECT_GE(m.multiplier, int32_t{1} << 30);
    EXPECT_LE(m.shift, 32);
    const double held = std::ldexp(static_cast<double>(m.multiplier), m.shift - 31);
    EXPECT_LE(std::abs(held - real), real * std::ldexp(1.0, -30));
  }
}

TEST(FixedPoint, QuantizeMultiplierRejectsOutOfRange) {
  for (double bad : {0.0, -1.0, 2147483648.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()})
    EXPECT_THROW(quantize_multiplier(bad), Error) << bad;
  // So small that every int32 rounds to zero.
  const QuantizedMultiplier tiny = quantize_multiplier(1e-30);
  EXPECT_EQ(multiply_by_quantized_multiplier(kMax, tiny), 0);
}

TEST(FixedPoint, MultiplyMatchesWideIntegerRounding) {
  std::mt19937 rng(2);
  std::vector<QuantizedMultiplier> multipliers = {{int32_t{1} << 30, 0},
                                                  {kMax, 0},
                                                  {kMax, -31},
                                                  {int32_t{1} << 30, -62},
                                                  {kMax, 31},
                                                  {int32_t{1} << 30, 1}};
  std::uniform_int_distribution<int32_t> mantissa(int32_t{1} << 30, kMax);
  std::uniform_int_distribution<int> shift(-62, 31);
  for (int i = 0; i < 300; ++i) multipliers.push_back({mantissa(rng), shift(rng)});
  std::uniform_real_distribution<double> exponent(-40.0, 20.0);
  for (int i = 0; i < 300; ++i) multipliers.push_back(quantize_multiplier(std::exp2(exponent(rng))));
  const std::vector<int32_t> xs = interesting_values(rng, 300);
  int64_t checked = 0;
  for (const QuantizedMultiplier& m : multipliers)
    for (int32_t x : xs) {
      ASSERT_EQ(multiply_by_quantized_multiplier(x, m), wide_multiply(x, m))
          << "x " << x << " multiplier " << m.multiplier << " shift " << m.shift;
      ++checked;
    }
  EXPECT_GT(checked, 100000);
}

TEST(FixedPoint, HighMulSaturatesTheOneOverflow) {
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kMin, kMin), kMax);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(kMin, kMax), -kMax);
  // Ties round upwards: 2 * 2^29 * 2^0 / 2^32 ... an exact half.
  EXPECT_EQ(saturating_rounding_doubling_high_mul(int32_t{1} << 30, 1), 1);
  EXPECT_EQ(saturating_rounding_doubling_high_mul(-(int32_t{1} << 30), 1), 0);
}

TEST(FixedPoint, RoundingDivideRoundsHalfAwayFromZero) {
  EXPECT_EQ(rounding_divide_by_pot(5, 1), 3);
  EXPECT_EQ(rounding_divide_by_pot(-5, 1), -3);
  EXPECT_EQ(rounding_divide_by_pot(4, 3), 1);
  EXPECT_EQ(rounding_divide_by_pot(3, 3), 0);
  EXPECT_EQ(rounding_divide_by_pot(-4, 3), -1);
  EXPECT_EQ(rounding_divide_by_pot(kMax, 31), 1);
  EXPECT_EQ(rounding_divide_by_pot(kMin, 31), -1);
  EXPECT_EQ(rounding_divide_by_pot(kMax, 40), 0);
}

// The point of the exercise: round(x * real) to within one unit.
TEST(FixedPoint, MultiplyApproximatesTheRealProduct) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> exponent(-20.0, 0.0);
  std::uniform_int_distribution<int32_t> x_dist(-(1 << 24), 1 << 24);
  for (int i = 0; i < 20000; ++i) {
    const double real = std::exp2(exponent(rng));
    const int32_t x = x_dist(rng);
    const double want = std::round(x * real);
    EXPECT_LE(std::abs(multiply_by_quantized_multiplier(x, quantize_multiplier(real)) - want), 1)
        << x << " * " << real;
  }
}

// The vectorized epilogue of the int8 kernels against requantize_value, element by element,
// for channel counts around the vector width and multipliers above and below one.
TEST(FixedPoint, RequantizeRowsMatchesRequantizeValue) {
  std::mt19937 rng(4);
  // Multipliers in (2^-25, 2^-1) (the vector path), then some above one or below 2^-32 (the
  // portable path).
  std::uniform_real_distribution<double> usual(-25.0, -1.0), any(-40.0, 3.0);
  for (int64_t channels : {1, 5, 15, 16, 17, 33, 64})
    for (bool unusual : {false, true}) {
      SCOPED_TRACE(::testing::Message() << channels << " channels, unusual " << unusual);
      const int64_t rows = 37;
      std::vector<QuantizedMultiplier> m;
      for (int64_t c = 0; c < channels; ++c)
        m.push_back(quantize_multiplier(std::exp2(unusual ? any(rng) : usual(rng))));
      std::vector<int32_t> acc = interesting_values(rng, static_cast<int>(rows * channels));
      acc.resize(static_cast<size_t>(rows * channels));
      for (const QuantClamp clamp : {QuantClamp{0, 255}, QuantClamp{17, 200}}) {
        std::vector<uint8_t> got(acc.size());
        requantize_rows(acc.data(), rows, channels, m, 17, clamp, got.data());
        for (size_t i = 0; i < acc.size(); ++i)
          ASSERT_EQ(got[i], requantize_value(acc[i], m[i % static_cast<size_t>(channels)], 17, clamp))
              << "element " << i << " acc " << acc[i];
      }
    }
}

}  // namespace
}  // namespace sf
