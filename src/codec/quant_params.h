// The affine u8 quantization of activations: real = scale * (q - zero_point), with
// zero_point an integer in 0..255, so that real zero is exactly representable (zero padding
// and ReLU stay exact); and the scalar definitions of the integer ops' arithmetic (bias,
// requantization, activation clamps, QuantizedAdd). The reference kernels, the vectorized
// loops (kernels/int8_loops.h) and calibration all use these, so they cannot disagree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "codec/fixed_point.h"
#include "core/activation.h"

namespace sf {

struct QuantParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
};

// The params covering [min(lo, 0), max(hi, 0)]: scale = range / 255 (1 for an empty range),
// zero_point = clamp(round(-min / scale), 0, 255).
inline QuantParams choose_quant_params(float lo, float hi) {
  const float min = std::min(lo, 0.0f);
  const float max = std::max(hi, 0.0f);
  QuantParams p;
  p.scale = max > min ? (max - min) / 255.0f : 1.0f;
  const double zp = std::round(-static_cast<double>(min) / p.scale);
  p.zero_point = static_cast<int32_t>(std::clamp(zp, 0.0, 255.0));
  return p;
}

// clamp(round(x / scale) + zero_point, 0, 255), ties away from zero.
inline uint8_t quantize_value(float x, QuantParams p) {
  const double q = std::round(static_cast<double>(x) / p.scale) + p.zero_point;
  if (std::isnan(q)) return static_cast<uint8_t>(p.zero_point);
  return static_cast<uint8_t>(std::clamp(q, 0.0, 255.0));
}

inline float dequantize_value(uint8_t q, QuantParams p) {
  return p.scale * static_cast<float>(static_cast<int32_t>(q) - p.zero_point);
}

// A float bias in the accumulator's units, scale_x * scale_w: round(bias / (scale_x * scale_w)),
// saturated to int32. Every integer conv/matmul kernel adds exactly this.
inline int32_t quantize_bias(float bias, float x_scale, float w_scale) {
  const double q = std::round(static_cast<double>(bias) /
                              (static_cast<double>(x_scale) * static_cast<double>(w_scale)));
  if (std::isnan(q)) return 0;
  return static_cast<int32_t>(std::clamp(q, -2147483648.0, 2147483647.0));
}

// The fixed-point multiplier taking an accumulator in units of x_scale * w_scale to units of
// out_scale.
inline QuantizedMultiplier requantize_multiplier(float x_scale, float w_scale, float out_scale) {
  return quantize_multiplier(static_cast<double>(x_scale) * static_cast<double>(w_scale) /
                             static_cast<double>(out_scale));
}

// The u8 output range an activation leaves: relu clamps at the zero point, relu6 also at
// zero_point + round(6 / scale).
struct QuantClamp {
  int32_t lo = 0, hi = 255;
};

inline QuantClamp activation_clamp(Activation activation, QuantParams out) {
  QuantClamp c;
  if (activation != Activation::None) c.lo = out.zero_point;
  if (activation == Activation::Relu6) {
    const double six = std::round(6.0 / static_cast<double>(out.scale)) + out.zero_point;
    c.hi = static_cast<int32_t>(std::min(six, 255.0));
  }
  return c;
}

// clamp(zero_point + round(acc * m), lo, hi).
inline uint8_t requantize_value(int32_t acc, QuantizedMultiplier m, int32_t zero_point,
                                QuantClamp clamp) {
  const int64_t q = int64_t{zero_point} + multiply_by_quantized_multiplier(acc, m);
  return static_cast<uint8_t>(std::clamp<int64_t>(q, clamp.lo, clamp.hi));
}

// TFLite's integer add: both inputs move to a common fine fixed-point scale
// (2 * max input scale / 2^20) with multipliers below one, add exactly there, and the sum is
// requantized to the output scale.
struct QuantizedAddParams {
  static constexpr int kLeftShift = 20;
  int32_t a_zero_point = 0, b_zero_point = 0, out_zero_point = 0;
  QuantizedMultiplier a, b, out;
  QuantClamp clamp;
};

inline QuantizedAddParams quantized_add_params(QuantParams a, QuantParams b, QuantParams out,
                                               QuantClamp clamp) {
  const double twice_max = 2.0 * std::max(a.scale, b.scale);
  QuantizedAddParams p;
  p.a_zero_point = a.zero_point;
  p.b_zero_point = b.zero_point;
  p.out_zero_point = out.zero_point;
  p.a = quantize_multiplier(a.scale / twice_max);
  p.b = quantize_multiplier(b.scale / twice_max);
  p.out = quantize_multiplier(
      twice_max / (static_cast<double>(1 << QuantizedAddParams::kLeftShift) * out.scale));
  p.clamp = clamp;
  return p;
}

inline uint8_t quantized_add_value(uint8_t a, uint8_t b, const QuantizedAddParams& p) {
  const int32_t sa = multiply_by_quantized_multiplier(
      (a - p.a_zero_point) * (1 << QuantizedAddParams::kLeftShift), p.a);
  const int32_t sb = multiply_by_quantized_multiplier(
      (b - p.b_zero_point) * (1 << QuantizedAddParams::kLeftShift), p.b);
  return requantize_value(sa + sb, p.out, p.out_zero_point, p.clamp);
}

}  // namespace sf
