// XNOR products with VPOPCNTDQ on the channel-interleaved planes (bit_gemm.h): one vector holds
// word i of 8 output channels, the activation word is broadcast, and each lane accumulates its
// own channel's count, so no horizontal sums are needed.
#include "kernels/binary/bit_gemm_avx512.h"

#include <immintrin.h>

#include <algorithm>

#include "cpu/avx512_lanes.h"
#include "cpu/parallel_for.h"

namespace sf::binary {

// GCC 12's intrinsics start from _mm256_undefined_si256(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined here (_mm512_cvtepi64_epi32).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

constexpr int64_t kLanes = 8;

// Counts for one activation row against the 8 channels of block b.
__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) void block_counts(
    const uint64_t* row, const PackedWeights& w, int64_t b, int32_t* dot) {
  const int64_t words = w.words;
  const uint64_t* plus = w.plus_by8.data() + b * words * kLanes;
  const int64_t c0 = b * kLanes;
  const auto lanes = static_cast<__mmask8>((1u << std::min<int64_t>(kLanes, w.n - c0)) - 1);
  if (!w.ternary) {
    __m512i mismatches = _mm512_setzero_si512();
    for (int64_t i = 0; i < words; ++i) {
      const __m512i a = _mm512_set1_epi64(static_cast<long long>(row[i]));
      const __m512i p = _mm512_loadu_si512(plus + i * kLanes);
      mismatches = _mm512_add_epi64(mismatches, _mm512_popcnt_epi64(_mm512_xor_si512(a, p)));
    }
    // dot = K - 2 * mismatches, exact in 32 bits.
    const __m512i k = _mm512_set1_epi64(w.k);
    const __m512i d = _mm512_sub_epi64(k, _mm512_add_epi64(mismatches, mismatches));
    _mm256_mask_storeu_epi32(dot + c0, lanes, _mm512_cvtepi64_epi32(d));
    return;
  }
  const uint64_t* minus = w.minus_by8.data() + b * words * kLanes;
  __m512i plus_on = _mm512_setzero_si512(), minus_on = _mm512_setzero_si512();
  for (int64_t i = 0; i < words; ++i) {
    const __m512i a = _mm512_set1_epi64(static_cast<long long>(row[i]));
    plus_on = _mm512_add_epi64(
        plus_on, _mm512_popcnt_epi64(_mm512_and_si512(a, _mm512_loadu_si512(plus + i * kLanes))));
    minus_on = _mm512_add_epi64(
        minus_on, _mm512_popcnt_epi64(_mm512_and_si512(a, _mm512_loadu_si512(minus + i * kLanes))));
  }
  // dot = 2 * plus_on - |plus| - 2 * minus_on + |minus|, the counts per channel added in 32 bits.
  const __m256i on = _mm512_cvtepi64_epi32(
      _mm512_sub_epi64(_mm512_add_epi64(plus_on, plus_on), _mm512_add_epi64(minus_on, minus_on)));
  const __m256i plus_count = _mm256_maskz_loadu_epi32(lanes, w.plus_count.data() + c0);
  const __m256i minus_count = _mm256_maskz_loadu_epi32(lanes, w.minus_count.data() + c0);
  _mm256_mask_storeu_epi32(dot + c0, lanes,
                           _mm256_add_epi32(_mm256_sub_epi32(on, plus_count), minus_count));
}

// Binary counts for kRows activation rows against block b: each weight vector loaded once
// serves kRows rows, so the loop is bound by popcounts rather than loads.
constexpr int64_t kRows = 4;

__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) void binary_block_counts_rows(
    const uint64_t* rows, const PackedWeights& w, int64_t b, int32_t* dot) {
  const int64_t words = w.words;
  const uint64_t* plus = w.plus_by8.data() + b * words * kLanes;
  const int64_t c0 = b * kLanes;
  const auto lanes = static_cast<__mmask8>((1u << std::min<int64_t>(kLanes, w.n - c0)) - 1);
  __m512i mismatches[kRows];
  for (__m512i& m : mismatches) m = _mm512_setzero_si512();
  for (int64_t i = 0; i < words; ++i) {
    const __m512i p = _mm512_loadu_si512(plus + i * kLanes);
    for (int64_t r = 0; r < kRows; ++r) {
      const __m512i a = _mm512_set1_epi64(static_cast<long long>(rows[r * words + i]));
      mismatches[r] = _mm512_add_epi64(mismatches[r], _mm512_popcnt_epi64(_mm512_xor_si512(a, p)));
    }
  }
  const __m512i k = _mm512_set1_epi64(w.k);
  for (int64_t r = 0; r < kRows; ++r) {
    const __m512i d = _mm512_sub_epi64(k, _mm512_add_epi64(mismatches[r], mismatches[r]));
    _mm256_mask_storeu_epi32(dot + r * w.n + c0, lanes, _mm512_cvtepi64_epi32(d));
  }
}

}  // namespace

__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) bool pack_signs_avx512(
    const float* x, int64_t rows, int64_t k, int64_t words, uint64_t* out) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f),
               minus_one = _mm512_set1_ps(-1.0f);
  bool signs = true;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < words; ++i) {
      uint64_t word = 0;
      const float* v = x + r * k + i * 64;
      const int64_t len = std::min<int64_t>(64, k - i * 64);
      for (int64_t j = 0; j < len; j += 16) {
        const __mmask16 lanes = lanes16(j, len);
        const __m512 a = load16(v + j, lanes);
        const __mmask16 positive = _mm512_mask_cmp_ps_mask(lanes, a, zero, _CMP_GT_OQ);
        const __mmask16 unit = _mm512_mask_cmp_ps_mask(lanes, a, one, _CMP_EQ_OQ) |
                               _mm512_mask_cmp_ps_mask(lanes, a, minus_one, _CMP_EQ_OQ);
        signs &= unit == lanes;
        word |= static_cast<uint64_t>(positive) << j;
      }
      out[r * words + i] = word;
    }
  return signs;
}

void xnor_gemm_avx512(const uint64_t* a, int64_t m, const PackedWeights& w, int32_t* dot,
                      bool split) {
  const int64_t blocks = (w.n + kLanes - 1) / kLanes;
  // Binary layers take rows kRows at a time; ternary ones, and the rows left over, one by one.
  const int64_t groups = w.ternary ? 0 : m / kRows;
  const int64_t grouped = groups * kRows;
  parallel_region(
      split, [&]() __attribute__((
                                          target("avx512f,avx512vl,avx512vpopcntdq"))) {
#pragma omp for collapse(2) schedule(static) nowait
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t b = 0; b < blocks; ++b)
            binary_block_counts_rows(a + g * kRows * w.words, w, b, dot + g * kRows * w.n);
#pragma omp for collapse(2) schedule(static)
        for (int64_t r = grouped; r < m; ++r)
          for (int64_t b = 0; b < blocks; ++b) block_counts(a + r * w.words, w, b, dot + r * w.n);
      });
}

#pragma GCC diagnostic pop

}  // namespace sf::binary
