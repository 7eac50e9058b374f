// The batched accumulate is one portable loop compiled for AVX-512, AVX2 and the baseline ISA
// (picked at run time, as sparse_accumulate.cc does); the quad strip is vpdpbusd intrinsics with
// a scalar twin for CPUs without VNNI and for tests.
#include "kernels/sparse/int8_sparse_product.h"

#include <immintrin.h>

#include <algorithm>

namespace sf::sparse {

namespace {

template <typename Index>
[[gnu::always_inline]] inline void int8_accumulate_loop(const uint8_t* src, const Index* index,
                                                        const int8_t* values, int64_t count,
                                                        int64_t len, int32_t* out) {
  // A chunk of sums small enough that the compiler keeps them in registers.
  constexpr int64_t kChunk = 64;
  for (int64_t start = 0; start < len; start += kChunk) {
    const int64_t n = std::min(kChunk, len - start);
    int32_t acc[kChunk] = {};
    for (int64_t j = 0; j < count; ++j) {
      const int32_t v = values[j];
      const uint8_t* row = src + static_cast<int64_t>(index[j]) * len + start;
      for (int64_t i = 0; i < n; ++i) acc[i] += v * int32_t{row[i]};
    }
    std::copy(acc, acc + n, out + start);
  }
}

template <typename Index>
void int8_accumulate_portable(const uint8_t* src, const Index* index, const int8_t* values,
                              int64_t count, int64_t len, int32_t* out) {
  int8_accumulate_loop(src, index, values, count, len, out);
}

template <typename Index>
__attribute__((target("avx2"))) void int8_accumulate_avx2(const uint8_t* src, const Index* index,
                                                          const int8_t* values, int64_t count,
                                                          int64_t len, int32_t* out) {
  int8_accumulate_loop(src, index, values, count, len, out);
}

template <typename Index>
__attribute__((target("avx512f,avx512bw"))) void int8_accumulate_avx512(
    const uint8_t* src, const Index* index, const int8_t* values, int64_t count, int64_t len,
    int32_t* out) {
  int8_accumulate_loop(src, index, values, count, len, out);
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

#pragma GCC diagnostic pop

}  // namespace

bool has_avx512_vnni() {
  static const bool yes = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return yes;
}

QuadStripFn best_quad_strip() { return has_avx512_vnni() ? quad_strip_vnni : quad_strip_portable; }

QuadStripFn portable_quad_strip() { return quad_strip_portable; }

template <typename Index>
Int8AccumulateFn<Index> best_int8_accumulate() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
    return int8_accumulate_avx512<Index>;
  if (__builtin_cpu_supports("avx2")) return int8_accumulate_avx2<Index>;
  return int8_accumulate_portable<Index>;
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
