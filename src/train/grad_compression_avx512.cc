#include "train/grad_compression_avx512.h"

#include <immintrin.h>

#include <cstring>

#include "codec/weight_codec.h"

namespace sf {

// GCC 12's intrinsics start from an undefined vector, a deliberate self-initialization that
// -Wmaybe-uninitialized reports once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

// max(lo, x) then min(hi, x) keep a NaN x (the second operand is returned when either is NaN),
// as std::clamp does in the scalar path.
__attribute__((target("avx512f"))) __m512 clamp_to_half_range(__m512 x) {
  return _mm512_min_ps(_mm512_set1_ps(65504.0f), _mm512_max_ps(_mm512_set1_ps(-65504.0f), x));
}

}  // namespace

__attribute__((target("avx512f"))) void compress_fp16_avx512(float* residual, int64_t n,
                                                             uint8_t* message) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = _mm512_loadu_ps(residual + i);
    const __m256i h = _mm512_cvtps_ph(clamp_to_half_range(r), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(message + 2 * i), h);
    _mm512_storeu_ps(residual + i, _mm512_sub_ps(r, _mm512_cvtph_ps(h)));
  }
  if (i == n) return;
  const auto rest = static_cast<__mmask16>((1u << (n - i)) - 1);
  const __m512 r = _mm512_maskz_loadu_ps(rest, residual + i);
  const __m256i h = _mm512_cvtps_ph(clamp_to_half_range(r), _MM_FROUND_TO_NEAREST_INT);
  alignas(32) uint16_t halves[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(halves), h);
  std::memcpy(message + 2 * i, halves, static_cast<size_t>(n - i) * 2);
  _mm512_mask_storeu_ps(residual + i, rest, _mm512_sub_ps(r, _mm512_cvtph_ps(h)));
}

__attribute__((target("avx512f"))) void add_decoded_fp16_avx512(const uint8_t* message,
                                                                int64_t n, float* sum) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(message + 2 * i));
    _mm512_storeu_ps(sum + i, _mm512_add_ps(_mm512_loadu_ps(sum + i), _mm512_cvtph_ps(h)));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, message + 2 * i, 2);
    sum[i] += quant::half_to_float(h);
  }
}

#pragma GCC diagnostic pop

}  // namespace sf
