// A 16 x 16 transpose of int32 in AVX-512 registers, for the int8 sparse kernels' sums, which
// their loops compute channel-major and the node wants pixel-major. For functions compiled with
// target("avx512f") (the build itself targets baseline x86-64).
#pragma once

#include <immintrin.h>

namespace sf::sparse {

// Transposes 16 vectors in place: afterwards r[p][c] is what r[c][p] was.
__attribute__((target("avx512f"), always_inline)) inline void transpose_16x16(__m512i* r) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4g + j], lane L: position 4L + j of rows 4g .. 4g + 3.
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i even_a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);  // lanes 0, 2 of each
    const __m512i even_b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i odd_a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);  // lanes 1, 3 of each
    const __m512i odd_b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(even_a, even_b, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(odd_a, odd_b, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(even_a, even_b, 0xDD);
    r[12 + j] = _mm512_shuffle_i32x4(odd_a, odd_b, 0xDD);
  }
}

}  // namespace sf::sparse
