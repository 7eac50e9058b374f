#include "kernels/int8_loops.h"

#include <immintrin.h>

namespace sf {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements; below this threads cost more than they save

// The vector code covers multipliers below one whose right shift fits an int32 lane (every
// practical requantization); anything else takes the scalar loops.
bool vector_friendly(QuantizedMultiplier m) { return m.shift <= 0 && m.shift >= -31; }

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return yes;
}

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// multiply_by_quantized_multiplier on 16 lanes, for multipliers m (in [2^30, 2^31)) with right
// shifts e in [0, 31]. With a positive multiplier SaturatingRoundingDoublingHighMul never
// overflows and equals floor((x * m + 2^30) / 2^31), computed on 64-bit even and odd lanes.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i multiply_avx512(__m512i x, __m512i m,
                                                                  __m512i e) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i nudge = _mm512_set1_epi64(int64_t{1} << 30);
  const __m512i even = _mm512_srai_epi64(_mm512_add_epi64(_mm512_mul_epi32(x, m), nudge), 31);
  const __m512i odd = _mm512_srai_epi64(
      _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(m, 32)),
                       nudge),
      31);
  const __m512i high = _mm512_mask_blend_epi32(static_cast<__mmask16>(0xAAAA), even,
                                               _mm512_slli_epi64(odd, 32));
  // RoundingDivideByPOT: ties away from zero.
  const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, e), one);
  const __m512i remainder = _mm512_and_si512(high, mask);
  const __m512i threshold =
      _mm512_add_epi32(_mm512_srli_epi32(mask, 1), _mm512_srli_epi32(high, 31));
  const __m512i q = _mm512_srav_epi32(high, e);
  return _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(remainder, threshold), q, one);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i clamp_avx512(__m512i q, int32_t zero_point,
                                                               QuantClamp clamp) {
  q = _mm512_add_epi32(q, _mm512_set1_epi32(zero_point));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(clamp.lo)),
                          _mm512_set1_epi32(clamp.hi));
}

__mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void requantize_rows_avx512(
    const int32_t* acc, int64_t rows, int64_t channels,
    const std::vector<QuantizedMultiplier>& multipliers, int32_t zero_point, QuantClamp clamp,
    uint8_t* out) {
  std::vector<int32_t> mult(static_cast<size_t>(channels)), right(static_cast<size_t>(channels));
  for (size_t c = 0; c < multipliers.size(); ++c) {
    mult[c] = multipliers[c].multiplier;
    right[c] = -multipliers[c].shift;
  }
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < channels; j += 16) {
      const __mmask16 k = tail_mask(channels - j);
      const __m512i q = multiply_avx512(_mm512_maskz_loadu_epi32(k, acc + r * channels + j),
                                        _mm512_maskz_loadu_epi32(k, mult.data() + j),
                                        _mm512_maskz_loadu_epi32(k, right.data() + j));
      _mm512_mask_cvtepi32_storeu_epi8(out + r * channels + j, k,
                                       clamp_avx512(q, zero_point, clamp));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantized_add_avx512(const uint8_t* a, const uint8_t* b,
                                                             int64_t count,
                                                             const QuantizedAddParams& p,
                                                             uint8_t* out) {
  const __m512i am = _mm512_set1_epi32(p.a.multiplier), ae = _mm512_set1_epi32(-p.a.shift);
  const __m512i bm = _mm512_set1_epi32(p.b.multiplier), be = _mm512_set1_epi32(-p.b.shift);
  const __m512i om = _mm512_set1_epi32(p.out.multiplier), oe = _mm512_set1_epi32(-p.out.shift);
  const __m512i a_zp = _mm512_set1_epi32(p.a_zero_point);
  const __m512i b_zp = _mm512_set1_epi32(p.b_zero_point);
  const int64_t blocks = (count + 15) / 16;
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t i = block * 16;
    const __mmask16 k = tail_mask(count - i);
    const __m512i av = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, a + i));
    const __m512i bv = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, b + i));
    const __m512i sa = multiply_avx512(
        _mm512_slli_epi32(_mm512_sub_epi32(av, a_zp), QuantizedAddParams::kLeftShift), am, ae);
    const __m512i sb = multiply_avx512(
        _mm512_slli_epi32(_mm512_sub_epi32(bv, b_zp), QuantizedAddParams::kLeftShift), bm, be);
    const __m512i q = multiply_avx512(_mm512_add_epi32(sa, sb), om, oe);
    _mm512_mask_cvtepi32_storeu_epi8(out + i, k, clamp_avx512(q, p.out_zero_point, p.clamp));
  }
}

#pragma GCC diagnostic pop

}  // namespace

void requantize_rows(const int32_t* acc, int64_t rows, int64_t channels,
                     const std::vector<QuantizedMultiplier>& multipliers, int32_t zero_point,
                     QuantClamp clamp, uint8_t* out) {
  bool vector = has_avx512();
  for (const QuantizedMultiplier& m : multipliers) vector = vector && vector_friendly(m);
  if (vector) return requantize_rows_avx512(acc, rows, channels, multipliers, zero_point, clamp, out);
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < channels; ++j)
      out[r * channels + j] = requantize_value(
          acc[r * channels + j], multipliers[static_cast<size_t>(j)], zero_point, clamp);
}

void quantized_add_elements(const uint8_t* a, const uint8_t* b, int64_t count,
                            const QuantizedAddParams& p, uint8_t* out) {
  if (has_avx512() && vector_friendly(p.a) && vector_friendly(p.b) && vector_friendly(p.out))
    return quantized_add_avx512(a, b, count, p, out);
#pragma omp parallel for schedule(static) if (count >= kParallelMin)
  for (int64_t i = 0; i < count; ++i) out[i] = quantized_add_value(a[i], b[i], p);
}

}  // namespace sf
