// The fp16 and one-bit messages of grad_compression.h in AVX-512F, 16 floats at a time: the
// scalar loops cost more than the step's allreduce on Deep-MNIST's 3.3 M gradients. Each gives
// the scalar path's bits exactly. Callers check cpu_features().avx512f.
//
// fp16: VCVTPS2PH rounds to nearest even and converts subnormals, NaN and infinity as
// float_to_half does.
#pragma once

#include <cstdint>

namespace sf {

void compress_fp16_avx512(float* residual, int64_t n, uint8_t* message);
void add_decoded_fp16_avx512(const uint8_t* message, int64_t n, float* sum);

// One-bit, one chunk of `count` floats at a time. A chunk's magnitudes are summed in 16
// interleaved float lanes (lane l takes floats l, l + 16, l + 32, ...), one register, which the
// scalar path does too, so both add the same floats in the same order.
void onebit_magnitude_lanes_avx512(const float* residual, int64_t count, float* lanes);
// Writes the sign bits of residual[0, count) to bits[0, ceil(count / 8)) (1 for negative, float i
// at bit i % 8 of byte i / 8) and subtracts from each float what its sign sends: +scale, or
// -scale for a negative float.
void onebit_signs_avx512(float* residual, int64_t count, float scale, uint8_t* bits);
// Adds to sum[0, count) what each sign bit sends.
void add_decoded_onebit_avx512(const uint8_t* bits, int64_t count, float scale, float* sum);

}  // namespace sf
