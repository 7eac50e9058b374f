// The batched accumulate is one portable loop compiled for AVX-512, AVX2 and the baseline ISA
// (picked at run time, as sparse_accumulate.cc does); the quad strip is vpdpbusd intrinsics with
// a scalar twin for CPUs without VNNI and for tests.
#include "kernels/sparse/int8_sparse_product.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/sparse/transpose_avx512.h"

namespace sf::sparse {

namespace {

template <typename Index>
[[gnu::always_inline]] inline void int8_accumulate_loop(const uint8_t* src, const Index* index,
                                                        int64_t stride, const int8_t* values,
                                                        int64_t count, int64_t len, int32_t* out) {
  // A chunk of sums small enough that the compiler keeps them in registers.
  constexpr int64_t kChunk = 64;
  for (int64_t start = 0; start < len; start += kChunk) {
    const int64_t n = std::min(kChunk, len - start);
    int32_t acc[kChunk] = {};
    for (int64_t j = 0; j < count; ++j) {
      const int32_t v = values[j];
      const uint8_t* row = src + static_cast<int64_t>(index[j]) * stride + start;
      for (int64_t i = 0; i < n; ++i) acc[i] += v * int32_t{row[i]};
    }
    std::copy(acc, acc + n, out + start);
  }
}

template <typename Index>
void int8_accumulate_portable(const uint8_t* src, const Index* index, int64_t stride,
                              const int8_t* values, int64_t count, int64_t len, int32_t* out) {
  int8_accumulate_loop(src, index, stride, values, count, len, out);
}

template <typename Index>
__attribute__((target("avx2"))) void int8_accumulate_avx2(const uint8_t* src, const Index* index,
                                                          int64_t stride, const int8_t* values,
                                                          int64_t count, int64_t len,
                                                          int32_t* out) {
  int8_accumulate_loop(src, index, stride, values, count, len, out);
}

template <typename Index>
__attribute__((target("avx512f,avx512bw"))) void int8_accumulate_avx512(
    const uint8_t* src, const Index* index, int64_t stride, const int8_t* values, int64_t count,
    int64_t len, int32_t* out) {
  int8_accumulate_loop(src, index, stride, values, count, len, out);
}

// The four inputs of a quad packed as vpdpbusd's u8 operand: x[k_b] in byte b.
inline uint32_t quad_inputs(const uint32_t* rows, const uint8_t* x) {
  return uint32_t{x[rows[0]]} | uint32_t{x[rows[1]]} << 8 | uint32_t{x[rows[2]]} << 16 |
         uint32_t{x[rows[3]]} << 24;
}

void quad_strip_portable(const uint32_t* rows, const int8_t* values, int64_t quads,
                         const uint8_t* x, int32_t* out) {
  int32_t acc[kQuadBlock] = {};
  for (int64_t q = 0; q < quads; ++q) {
    const uint32_t* k = rows + q * kQuadDepth;
    const int8_t* v = values + q * kQuadDepth * kQuadBlock;
    for (int64_t i = 0; i < kQuadBlock; ++i)
      for (int64_t b = 0; b < kQuadDepth; ++b) acc[i] += v[i * kQuadDepth + b] * int32_t{x[k[b]]};
  }
  std::copy(acc, acc + kQuadBlock, out);
}

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined (as in kernels/int8_loops.cc).
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

void quad_runs_portable(const uint32_t* rows, const int8_t* values, int64_t quads,
                        const uint8_t* src, int64_t len, int32_t* out) {
  std::fill(out, out + len * kQuadBlock, 0);
  for (int64_t q = 0; q < quads; ++q) {
    const uint32_t* k = rows + q * kQuadDepth;
    const int8_t* v = values + q * kQuadDepth * kQuadBlock;
    for (int64_t p = 0; p < len; ++p)
      for (int64_t i = 0; i < kQuadBlock; ++i)
        for (int64_t b = 0; b < kQuadDepth; ++b)
          out[p * kQuadBlock + i] += v[i * kQuadDepth + b] * int32_t{src[k[b] + p]};
  }
}

#pragma GCC diagnostic pop

}  // namespace

BlockQuads quads_of(const BlockCsr<uint32_t, int8_t>& blocks) {
  BlockQuads q;
  q.strips = blocks.strips;
  q.strip_start.push_back(0);
  for (int64_t s = 0; s < blocks.strips; ++s) {
    const int64_t begin = blocks.strip_start[static_cast<size_t>(s)];
    const int64_t end = blocks.strip_start[static_cast<size_t>(s + 1)];
    for (int64_t b0 = begin; b0 < end; b0 += kQuadDepth) {
      const size_t first_value = q.values.size();
      q.values.resize(first_value + kQuadDepth * kQuadBlock, 0);
      for (int64_t b = 0; b < kQuadDepth; ++b) {
        const bool padding = b0 + b >= end;
        q.rows.push_back(padding ? 0 : blocks.row[static_cast<size_t>(b0 + b)]);
        if (padding) continue;
        for (int64_t i = 0; i < kQuadBlock; ++i)
          q.values[first_value + static_cast<size_t>(i * kQuadDepth + b)] =
              blocks.value[static_cast<size_t>((b0 + b) * kQuadBlock + i)];
      }
    }
    q.strip_start.push_back(q.quads());
  }
  return q;
}

bool has_avx512_vnni() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return yes;
}

QuadStripFn best_quad_strip() { return has_avx512_vnni() ? quad_strip_vnni : quad_strip_portable; }

QuadStripFn portable_quad_strip() { return quad_strip_portable; }

QuadRunsFn best_quad_runs() { return has_avx512_vnni() ? quad_runs_vnni : quad_runs_portable; }

QuadRunsFn portable_quad_runs() { return quad_runs_portable; }

template <typename Index>
Int8AccumulateFn<Index> best_int8_accumulate() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
    return int8_accumulate_avx512<Index>;
  if (__builtin_cpu_supports("avx2")) return int8_accumulate_avx2<Index>;
  return int8_accumulate_portable<Index>;
}

Int8AccumulateFn<uint32_t> best_int8_run_accumulate() {
  return has_avx512_vnni() ? int8_accumulate_vnni : best_int8_accumulate<uint32_t>();
}

template <typename Index>
Int8AccumulateFn<Index> portable_int8_accumulate() {
  return int8_accumulate_portable<Index>;
}

template Int8AccumulateFn<uint16_t> best_int8_accumulate<uint16_t>();
template Int8AccumulateFn<uint32_t> best_int8_accumulate<uint32_t>();
template Int8AccumulateFn<uint16_t> portable_int8_accumulate<uint16_t>();
template Int8AccumulateFn<uint32_t> portable_int8_accumulate<uint32_t>();

}  // namespace sf::sparse
