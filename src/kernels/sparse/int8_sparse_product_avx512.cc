// The VNNI (vpdpbusd) loops of int8_sparse_product.h.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/sparse/avx512_loops.h"
#include "kernels/sparse/transpose_avx512.h"

namespace sf::sparse {

namespace {

// The four inputs of a quad packed as vpdpbusd's u8 operand: x[k_b] in byte b.
inline uint32_t quad_inputs(const uint32_t* rows, const uint8_t* x) {
  return uint32_t{x[rows[0]]} | uint32_t{x[rows[1]]} << 8 | uint32_t{x[rows[2]]} << 16 |
         uint32_t{x[rows[3]]} << 24;
}

}  // namespace

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined (as in kernels/int8_loops_avx512.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Two chains of sums: vpdpbusd's latency is several of its issue intervals.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void quad_strip_vnni(
    const uint32_t* rows, const int8_t* values, int64_t quads, const uint8_t* x, int32_t* out) {
  __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
  int64_t q = 0;
  for (; q + 2 <= quads; q += 2) {
    const int8_t* v = values + q * kQuadDepth * kQuadBlock;
    even = _mm512_dpbusd_epi32(
        even, _mm512_set1_epi32(static_cast<int32_t>(quad_inputs(rows + q * kQuadDepth, x))),
        _mm512_loadu_si512(v));
    odd = _mm512_dpbusd_epi32(
        odd, _mm512_set1_epi32(static_cast<int32_t>(quad_inputs(rows + (q + 1) * kQuadDepth, x))),
        _mm512_loadu_si512(v + kQuadDepth * kQuadBlock));
  }
  if (q < quads)
    even = _mm512_dpbusd_epi32(
        even, _mm512_set1_epi32(static_cast<int32_t>(quad_inputs(rows + q * kQuadDepth, x))),
        _mm512_loadu_si512(values + q * kQuadDepth * kQuadBlock));
  _mm512_storeu_si512(out, _mm512_add_epi32(even, odd));
}

// One chunk of up to 64 outputs: four nonzeros at a time, their rows interleaved within each
// 128-bit lane, which leaves output 16 * lane + 4 * q + d in dword 4 * lane + d of sums[q].
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void int8_accumulate_vnni(
    const uint8_t* src, const uint32_t* index, int64_t stride, const int8_t* values, int64_t count,
    int64_t len, int32_t* out) {
  constexpr int64_t kChunk = 64;
  for (int64_t start = 0; start < len; start += kChunk) {
    const int64_t n = std::min(kChunk, len - start);
    const __mmask64 mask = n == kChunk ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
    __m512i sums[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                       _mm512_setzero_si512()};
    for (int64_t j = 0; j < count; j += 4) {
      uint32_t packed = 0;
      __m512i x[4];
      for (int b = 0; b < 4; ++b) {
        const bool past_end = j + b >= count;
        packed |= past_end ? 0u : uint32_t{static_cast<uint8_t>(values[j + b])} << (8 * b);
        x[b] = past_end ? _mm512_setzero_si512()
                        : _mm512_maskz_loadu_epi8(
                              mask, src + static_cast<int64_t>(index[j + b]) * stride + start);
      }
      const __m512i w = _mm512_set1_epi32(static_cast<int32_t>(packed));
      const __m512i &x0 = x[0], &x1 = x[1], &x2 = x[2], &x3 = x[3];
      const __m512i lo01 = _mm512_unpacklo_epi8(x0, x1), hi01 = _mm512_unpackhi_epi8(x0, x1);
      const __m512i lo23 = _mm512_unpacklo_epi8(x2, x3), hi23 = _mm512_unpackhi_epi8(x2, x3);
      sums[0] = _mm512_dpbusd_epi32(sums[0], _mm512_unpacklo_epi16(lo01, lo23), w);
      sums[1] = _mm512_dpbusd_epi32(sums[1], _mm512_unpackhi_epi16(lo01, lo23), w);
      sums[2] = _mm512_dpbusd_epi32(sums[2], _mm512_unpacklo_epi16(hi01, hi23), w);
      sums[3] = _mm512_dpbusd_epi32(sums[3], _mm512_unpackhi_epi16(hi01, hi23), w);
    }
    // Transposes the 4 x 4 lanes: lane l of the outputs is lane l of sums[0], ..., sums[3].
    const __m512i lo01 = _mm512_shuffle_i32x4(sums[0], sums[1], 0x44);  // s0.l0 s0.l1 s1.l0 s1.l1
    const __m512i lo23 = _mm512_shuffle_i32x4(sums[2], sums[3], 0x44);
    const __m512i hi01 = _mm512_shuffle_i32x4(sums[0], sums[1], 0xEE);  // s0.l2 s0.l3 s1.l2 s1.l3
    const __m512i hi23 = _mm512_shuffle_i32x4(sums[2], sums[3], 0xEE);
    const __m512i lanes[4] = {
        _mm512_shuffle_i32x4(lo01, lo23, 0x88), _mm512_shuffle_i32x4(lo01, lo23, 0xDD),
        _mm512_shuffle_i32x4(hi01, hi23, 0x88), _mm512_shuffle_i32x4(hi01, hi23, 0xDD)};
    for (int64_t l = 0; l * 16 < n; ++l) {
      const int64_t left = n - l * 16;
      const __mmask16 store =
          left >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << left) - 1);
      _mm512_mask_storeu_epi32(out + start + l * 16, store, lanes[l]);
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void quad_runs_vnni(
    const uint32_t* rows, const int8_t* values, int64_t quads, const uint8_t* src, int64_t len,
    int32_t* out) {
  for (int64_t start = 0; start < len; start += kQuadBlock) {
    const int64_t n = std::min(kQuadBlock, len - start);
    const auto mask = static_cast<__mmask16>(n == kQuadBlock ? 0xFFFFu : (1u << n) - 1);
    __m512i sums[kQuadBlock];
#pragma GCC unroll 16
    for (int64_t i = 0; i < kQuadBlock; ++i) sums[i] = _mm512_setzero_si512();
    for (int64_t q = 0; q < quads; ++q) {
      const uint32_t* k = rows + q * kQuadDepth;
      const int8_t* v = values + q * kQuadDepth * kQuadBlock;
      const __m128i x0 = _mm_maskz_loadu_epi8(mask, src + k[0] + start);
      const __m128i x1 = _mm_maskz_loadu_epi8(mask, src + k[1] + start);
      const __m128i x2 = _mm_maskz_loadu_epi8(mask, src + k[2] + start);
      const __m128i x3 = _mm_maskz_loadu_epi8(mask, src + k[3] + start);
      const __m128i lo01 = _mm_unpacklo_epi8(x0, x1), hi01 = _mm_unpackhi_epi8(x0, x1);
      const __m128i lo23 = _mm_unpacklo_epi8(x2, x3), hi23 = _mm_unpackhi_epi8(x2, x3);
      // Dword p: the quad's four inputs at position p.
      __m512i x = _mm512_castsi128_si512(_mm_unpacklo_epi16(lo01, lo23));
      x = _mm512_inserti32x4(x, _mm_unpackhi_epi16(lo01, lo23), 1);
      x = _mm512_inserti32x4(x, _mm_unpacklo_epi16(hi01, hi23), 2);
      x = _mm512_inserti32x4(x, _mm_unpackhi_epi16(hi01, hi23), 3);
#pragma GCC unroll 16
      for (int64_t i = 0; i < kQuadBlock; ++i) {
        int32_t weights;  // output i's four weights
        std::memcpy(&weights, v + i * kQuadDepth, sizeof weights);
        sums[i] = _mm512_dpbusd_epi32(sums[i], x, _mm512_set1_epi32(weights));
      }
    }
    transpose_16x16(sums);
    // Indexed by constants only, so that the sums stay in registers.
#pragma GCC unroll 16
    for (int64_t p = 0; p < kQuadBlock; ++p)
      if (p < n) _mm512_storeu_si512(out + (start + p) * kQuadBlock, sums[p]);
  }
}

#pragma GCC diagnostic pop

}  // namespace sf::sparse
