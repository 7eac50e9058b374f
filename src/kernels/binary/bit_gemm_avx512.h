// The AVX-512 VPOPCNTDQ XNOR product (bit_gemm.h); x86-64 builds only, called when
// cpu_features() reports avx512f, avx512vl and avx512_vpopcntdq.
#pragma once

#include "kernels/binary/bit_gemm.h"

namespace sf::binary {

void xnor_gemm_avx512(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot,
                      bool split);
bool pack_signs_avx512(const float* x, int64_t rows, int64_t k, int64_t words, uint64_t* out);

}  // namespace sf::binary
