// XNOR products with VPOPCNTDQ: eight 64-bit words per instruction, four output channels per
// pass over an activation row so that each loaded activation vector serves four channels.
#include <immintrin.h>

#include <algorithm>

#include "kernels/binary/bit_gemm_avx512.h"

namespace sf::binary {

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined here (_mm512_reduce_add_epi64).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

constexpr int64_t kChannels = 4;

__attribute__((target("avx512f,avx512vpopcntdq"))) inline __m512i load(const uint64_t* p,
                                                                        __mmask8 mask) {
  return _mm512_maskz_loadu_epi64(mask, p);
}

// Mismatch counts (binary) of one row against channels c .. c + count - 1.
__attribute__((target("avx512f,avx512vpopcntdq"))) void binary_row(const uint64_t* row,
                                                                   const PackedWeights& w,
                                                                   int64_t c, int64_t count,
                                                                   int32_t* dot) {
  const int64_t words = w.words;
  __m512i acc[kChannels];
  for (int64_t j = 0; j < kChannels; ++j) acc[j] = _mm512_setzero_si512();
  for (int64_t i = 0; i < words; i += 8) {
    const __mmask8 mask = words - i >= 8 ? __mmask8{0xff}
                                         : static_cast<__mmask8>((1u << (words - i)) - 1);
    const __m512i a = load(row + i, mask);
    for (int64_t j = 0; j < count; ++j) {
      const __m512i b = load(w.plus.data() + (c + j) * words + i, mask);
      acc[j] = _mm512_add_epi64(acc[j], _mm512_popcnt_epi64(_mm512_xor_si512(a, b)));
    }
  }
  for (int64_t j = 0; j < count; ++j)
    dot[j] = static_cast<int32_t>(w.k - 2 * _mm512_reduce_add_epi64(acc[j]));
}

__attribute__((target("avx512f,avx512vpopcntdq"))) void ternary_row(const uint64_t* row,
                                                                    const PackedWeights& w,
                                                                    int64_t c, int32_t* dot) {
  const int64_t words = w.words;
  __m512i plus_on = _mm512_setzero_si512(), minus_on = _mm512_setzero_si512();
  for (int64_t i = 0; i < words; i += 8) {
    const __mmask8 mask = words - i >= 8 ? __mmask8{0xff}
                                         : static_cast<__mmask8>((1u << (words - i)) - 1);
    const __m512i a = load(row + i, mask);
    const __m512i p = load(w.plus.data() + c * words + i, mask);
    const __m512i n = load(w.minus.data() + c * words + i, mask);
    plus_on = _mm512_add_epi64(plus_on, _mm512_popcnt_epi64(_mm512_and_si512(a, p)));
    minus_on = _mm512_add_epi64(minus_on, _mm512_popcnt_epi64(_mm512_and_si512(a, n)));
  }
  *dot = static_cast<int32_t>(2 * _mm512_reduce_add_epi64(plus_on) -
                              w.plus_count[static_cast<size_t>(c)] -
                              2 * _mm512_reduce_add_epi64(minus_on) +
                              w.minus_count[static_cast<size_t>(c)]);
}

}  // namespace

void xnor_gemm_avx512(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot) {
  const int64_t blocks = (w.n + kChannels - 1) / kChannels;
#pragma omp parallel for collapse(2) schedule(static) if (m * w.n * w.words >= (1 << 15))
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c = b * kChannels;
      const uint64_t* row = a + r * w.words;
      if (w.ternary) {
        for (int64_t j = c; j < std::min(w.n, c + kChannels); ++j)
          ternary_row(row, w, j, dot + r * w.n + j);
      } else {
        binary_row(row, w, c, std::min(kChannels, w.n - c), dot + r * w.n + c);
      }
    }
}

#pragma GCC diagnostic pop

}  // namespace sf::binary
