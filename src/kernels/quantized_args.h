// Reading the params and scales inputs of the quantized ops inside kernels, checked once per
// run: they are ordinary tensors, so a bad value (a zero scale, a fractional zero point) is a
// user error naming the node rather than a crash or silent garbage.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel.h"
#include "codec/quant_params.h"

namespace sf {

// Input `i` as [scale, zero_point]: scale positive and finite, zero point an integer in 0..255.
QuantParams params_input(const KernelContext& ctx, int i);
// Input `i` as per-channel weight scales, a single scale repeated `channels` times; each
// positive and finite.
std::vector<float> scales_input(const KernelContext& ctx, int i, int64_t channels);
// Writes params into an f32[2] output.
void write_params(const Tensor& out, QuantParams p);

// Bias and fixed-point multipliers of a conv/matmul per output channel.
std::vector<int32_t> quantized_bias(const float* bias, float x_scale,
                                    const std::vector<float>& w_scales);
std::vector<QuantizedMultiplier> requantize_multipliers(float x_scale,
                                                        const std::vector<float>& w_scales,
                                                        float out_scale);

// QuantizedConcat's inputs as rows: y is `outer` rows of `y_row` bytes, and each row holds each
// input's `row` bytes in turn, requantized into y's params where the input's differ (`same`
// false; `multiplier` scale_in / scale_out).
struct ConcatInput {
  const uint8_t* x;
  int64_t row;
  QuantParams params;
  bool same;
  QuantizedMultiplier multiplier;
};
struct ConcatRows {
  int64_t outer = 1, y_row = 0;
  QuantParams out;
  std::vector<ConcatInput> inputs;
};
ConcatRows concat_rows_of(const KernelContext& ctx);

}  // namespace sf
