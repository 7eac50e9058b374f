// The AVX-512 build of Int8Outputs::accumulators for 16 channels.
#include <immintrin.h>

#include <algorithm>

#include "kernels/sparse/avx512_loops.h"
#include "kernels/sparse/transpose_avx512.h"

namespace sf::sparse {

namespace {

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined (as in kernels/int8_loops_avx512.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// The offsets of 16 channels added to their sums in int64 and narrowed to int32 with saturation,
// as the scalar accumulator() does.
__attribute__((target("avx512f"), always_inline)) inline __m512i offset_sums(__m512i sums,
                                                                             __m512i offsets_lo,
                                                                             __m512i offsets_hi) {
  const __m256i lo = _mm512_cvtsepi64_epi32(
      _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(sums)), offsets_lo));
  const __m256i hi = _mm512_cvtsepi64_epi32(
      _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(sums, 1)), offsets_hi));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

}  // namespace

// Each pixel's 16 sums loaded (channel stride 1), or blocks of 16 pixels of each channel loaded
// and transposed.
__attribute__((target("avx512f"))) void accumulators_16_avx512(
    const int32_t* sums, int64_t pixel_stride, int64_t channel_stride, int64_t pixels,
    const int64_t* offsets, int32_t* out, int64_t out_stride) {
  const __m512i offsets_lo = _mm512_loadu_si512(offsets);
  const __m512i offsets_hi = _mm512_loadu_si512(offsets + 8);
  if (channel_stride == 1) {
    for (int64_t p = 0; p < pixels; ++p)
      _mm512_storeu_si512(
          out + p * out_stride,
          offset_sums(_mm512_loadu_si512(sums + p * pixel_stride), offsets_lo, offsets_hi));
    return;
  }
  if (pixel_stride != 1) {  // neither layout: one gather per pixel
    const __m512i lanes =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(static_cast<int32_t>(channel_stride)));
    for (int64_t p = 0; p < pixels; ++p)
      _mm512_storeu_si512(out + p * out_stride,
                          offset_sums(_mm512_i32gather_epi32(lanes, sums + p * pixel_stride, 4),
                                      offsets_lo, offsets_hi));
    return;
  }
  for (int64_t p0 = 0; p0 < pixels; p0 += 16) {
    const int64_t n = std::min<int64_t>(16, pixels - p0);
    const auto mask = static_cast<__mmask16>(n == 16 ? 0xFFFFu : (1u << n) - 1);
    __m512i block[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)
      block[c] = _mm512_maskz_loadu_epi32(mask, sums + c * channel_stride + p0);
    transpose_16x16(block);
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p)
      if (p < n)
        _mm512_storeu_si512(out + (p0 + p) * out_stride,
                            offset_sums(block[p], offsets_lo, offsets_hi));
  }
}

#pragma GCC diagnostic pop

}  // namespace sf::sparse
