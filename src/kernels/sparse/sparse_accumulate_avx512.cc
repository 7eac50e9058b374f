// The AVX-512 build of sparse_accumulate.h's loop: the accumulators of a whole chunk stay in
// registers while the nonzeros stream past.
#include <immintrin.h>

#include <algorithm>

#include "cpu/avx512_lanes.h"
#include "kernels/sparse/avx512_loops.h"

namespace sf::sparse {

namespace {

// Adds value * row[0, Vectors x 16) into one set of sums; the last vector is masked by `tail`.
template <int Vectors>
__attribute__((target("avx512f"), always_inline)) inline void add_scaled_row(__m512* acc,
                                                                             float value,
                                                                             const float* row,
                                                                             __mmask16 tail) {
  const __m512 v = _mm512_set1_ps(value);
#pragma GCC unroll 8
  for (int i = 0; i + 1 < Vectors; ++i)
    acc[i] = _mm512_fmadd_ps(v, _mm512_loadu_ps(row + 16 * i), acc[i]);
  acc[Vectors - 1] =
      _mm512_fmadd_ps(v, load16(row + 16 * (Vectors - 1), tail), acc[Vectors - 1]);
}

// One chunk of `Vectors` x 16 outputs, the last vector masked by `tail`. With few vectors per
// nonzero the FMAs of consecutive nonzeros would wait on each other, so `Ways` independent sets
// of sums take turns and are added at the end.
template <typename Index, int Vectors, int Ways>
__attribute__((target("avx512f"), always_inline)) inline void chunk_avx512(
    const float* src, const Index* index, int64_t stride, const float* values, int64_t count,
    __mmask16 tail, float* out) {
  __m512 acc[Ways][Vectors];
#pragma GCC unroll 8
  for (int w = 0; w < Ways; ++w)
#pragma GCC unroll 8
    for (int i = 0; i < Vectors; ++i) acc[w][i] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + Ways <= count; j += Ways)
#pragma GCC unroll 8
    for (int w = 0; w < Ways; ++w)
      add_scaled_row<Vectors>(acc[w], values[j + w],
                              src + static_cast<int64_t>(index[j + w]) * stride, tail);
  for (; j < count; ++j)
    add_scaled_row<Vectors>(acc[0], values[j], src + static_cast<int64_t>(index[j]) * stride, tail);
#pragma GCC unroll 8
  for (int i = 0; i < Vectors; ++i) {
#pragma GCC unroll 8
    for (int w = 1; w < Ways; ++w) acc[0][i] = _mm512_add_ps(acc[0][i], acc[w][i]);
    store16(out + 16 * i, i + 1 < Vectors ? static_cast<__mmask16>(0xFFFF) : tail, acc[0][i]);
  }
}

}  // namespace

template <typename Index>
__attribute__((target("avx512f"))) void accumulate_avx512(const float* src, const Index* index,
                                                          int64_t stride, const float* values,
                                                          int64_t count, int64_t len, float* out) {
  constexpr int64_t kChunk = 8 * 16;  // up to 16 of the 32 vector registers hold sums
  for (int64_t start = 0; start < len; start += kChunk) {
    const int64_t n = std::min(kChunk, len - start);
    const int vectors = static_cast<int>((n + 15) / 16);
    const __mmask16 tail =
        n % 16 == 0 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n % 16)) - 1);
    const float* s = src + start;
    float* o = out + start;
    switch (vectors) {
      // FMAs take 4 cycles and 2 issue per cycle: 8 or more independent sums keep them busy.
      case 1:
        chunk_avx512<Index, 1, 8>(s, index, stride, values, count, tail, o);
        break;
      case 2:
        chunk_avx512<Index, 2, 4>(s, index, stride, values, count, tail, o);
        break;
      case 3:
        chunk_avx512<Index, 3, 3>(s, index, stride, values, count, tail, o);
        break;
      case 4:
        chunk_avx512<Index, 4, 2>(s, index, stride, values, count, tail, o);
        break;
      case 5:
        chunk_avx512<Index, 5, 2>(s, index, stride, values, count, tail, o);
        break;
      case 6:
        chunk_avx512<Index, 6, 2>(s, index, stride, values, count, tail, o);
        break;
      case 7:
        chunk_avx512<Index, 7, 2>(s, index, stride, values, count, tail, o);
        break;
      default:
        chunk_avx512<Index, 8, 2>(s, index, stride, values, count, tail, o);
        break;
    }
  }
}

template void accumulate_avx512<uint16_t>(const float*, const uint16_t*, int64_t, const float*,
                                          int64_t, int64_t, float*);
template void accumulate_avx512<uint32_t>(const float*, const uint32_t*, int64_t, const float*,
                                          int64_t, int64_t, float*);

}  // namespace sf::sparse
