#include "train/grad_compression_avx512.h"

#include <immintrin.h>

#include <cstring>

#include "codec/weight_codec.h"
#include "cpu/avx512_lanes.h"

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

__attribute__((target("avx512f"))) void onebit_magnitude_lanes_avx512(const float* residual,
                                                                      int64_t count, float* lanes) {
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 valid = lanes16(i, count);
    const __m512 r = load16(residual + i, valid);
    sum = _mm512_mask_add_ps(sum, valid, sum, _mm512_abs_ps(r));
  }
  _mm512_storeu_ps(lanes, sum);
}

__attribute__((target("avx512f"))) void onebit_signs_avx512(float* residual, int64_t count,
                                                            float scale, uint8_t* bits) {
  const __m512 positive_value = _mm512_set1_ps(scale);
  const __m512 negative_value = _mm512_set1_ps(-scale);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 valid = lanes16(i, count);
    const __m512 r = load16(residual + i, valid);
    const __mmask16 below = _mm512_mask_cmp_ps_mask(valid, r, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 sent = _mm512_mask_blend_ps(below, positive_value, negative_value);
    store16(residual + i, valid, _mm512_sub_ps(r, sent));
    const auto mask = static_cast<uint16_t>(below);
    std::memcpy(bits + i / 8, &mask, count - i > 8 ? 2 : 1);
  }
}

__attribute__((target("avx512f"))) void add_decoded_onebit_avx512(const uint8_t* bits,
                                                                  int64_t count, float scale,
                                                                  float* sum) {
  const __m512 positive_value = _mm512_set1_ps(scale);
  const __m512 negative_value = _mm512_set1_ps(-scale);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 valid = lanes16(i, count);
    uint16_t mask = 0;
    std::memcpy(&mask, bits + i / 8, count - i > 8 ? 2 : 1);
    const __m512 sent =
        _mm512_mask_blend_ps(static_cast<__mmask16>(mask), positive_value, negative_value);
    store16(sum + i, valid, _mm512_add_ps(load16(sum + i, valid), sent));
  }
}

#pragma GCC diagnostic pop

}  // namespace sf
