// The fp16 message of grad_compression.h with AVX-512F's conversions (VCVTPS2PH rounds to
// nearest even and converts subnormals, NaN and infinity as float_to_half does), 16 floats at a
// time: the scalar conversion cost more than the step's allreduce on Deep-MNIST's 3.3 M
// gradients. Callers check cpu_features().avx512f.
#pragma once

#include <cstdint>

namespace sf {

void compress_fp16_avx512(float* residual, int64_t n, uint8_t* message);
void add_decoded_fp16_avx512(const uint8_t* message, int64_t n, float* sum);

}  // namespace sf
