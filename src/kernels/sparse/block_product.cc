// Three builds of the strip loop, as in sparse_accumulate.cc: AVX-512 intrinsics (16 outputs
// fill a 512-bit register, 8 and 4 a 256- and 128-bit one), and the portable loop compiled for
// AVX2 and for the baseline ISA. Each build comes for 8, 4, 2 and 1 rows at once, so that a
// group of rows keeps all its sums in registers; any number of rows is cut into such groups.
#include "kernels/sparse/block_product.h"

#include <immintrin.h>

#include <algorithm>

#include "core/error.h"

namespace sf::sparse {

namespace {

template <typename Index>
using RowsFn = void (*)(const Index* index, const float* values, int64_t count, const float* a,
                        int64_t a_stride, float* out);

template <typename Index, int R, RowsFn<Index> By8, RowsFn<Index> By4, RowsFn<Index> By2,
          RowsFn<Index> By1>
void strip_by_row_groups(const Index* index, const float* values, int64_t count, const float* a,
                         int64_t a_stride, int64_t rows, float* out) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) By8(index, values, count, a + r * a_stride, a_stride, out + r * R);
  if (rows - r >= 4) {
    By4(index, values, count, a + r * a_stride, a_stride, out + r * R);
    r += 4;
  }
  if (rows - r >= 2) {
    By2(index, values, count, a + r * a_stride, a_stride, out + r * R);
    r += 2;
  }
  if (rows - r == 1) By1(index, values, count, a + r * a_stride, a_stride, out + r * R);
}

template <typename Index, int R, int Rows>
[[gnu::always_inline]] inline void strip_rows_loop(const Index* index, const float* values,
                                                   int64_t count, const float* a, int64_t a_stride,
                                                   float* out) {
  float acc[Rows][R] = {};
  for (int64_t b = 0; b < count; ++b) {
    const float* v = values + b * R;
    const float* x = a + index[b];
    for (int r = 0; r < Rows; ++r) {
      const float s = x[r * a_stride];
      for (int i = 0; i < R; ++i) acc[r][i] += s * v[i];
    }
  }
  for (int r = 0; r < Rows; ++r) std::copy(acc[r], acc[r] + R, out + r * R);
}

template <typename Index, int R, int Rows>
void strip_rows_portable(const Index* index, const float* values, int64_t count, const float* a,
                         int64_t a_stride, float* out) {
  strip_rows_loop<Index, R, Rows>(index, values, count, a, a_stride, out);
}

template <typename Index, int R, int Rows>
__attribute__((target("avx2,fma"))) void strip_rows_avx2(const Index* index, const float* values,
                                                         int64_t count, const float* a,
                                                         int64_t a_stride, float* out) {
  strip_rows_loop<Index, R, Rows>(index, values, count, a, a_stride, out);
}

// One register of R floats and the operations the AVX-512 loop needs on it.
template <int R>
struct Lanes;

template <>
struct Lanes<16> {
  using V = __m512;
  __attribute__((target("avx512f,fma"), always_inline)) static V zero() {
    return _mm512_setzero_ps();
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V load(const float* p) {
    return _mm512_loadu_ps(p);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V fma(float s, V v, V acc) {
    return _mm512_fmadd_ps(_mm512_set1_ps(s), v, acc);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V add(V a, V b) {
    return _mm512_add_ps(a, b);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static void store(float* p, V v) {
    _mm512_storeu_ps(p, v);
  }
};

template <>
struct Lanes<8> {
  using V = __m256;
  __attribute__((target("avx512f,fma"), always_inline)) static V zero() {
    return _mm256_setzero_ps();
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V load(const float* p) {
    return _mm256_loadu_ps(p);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V fma(float s, V v, V acc) {
    return _mm256_fmadd_ps(_mm256_set1_ps(s), v, acc);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V add(V a, V b) {
    return _mm256_add_ps(a, b);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static void store(float* p, V v) {
    _mm256_storeu_ps(p, v);
  }
};

template <>
struct Lanes<4> {
  using V = __m128;
  __attribute__((target("avx512f,fma"), always_inline)) static V zero() { return _mm_setzero_ps(); }
  __attribute__((target("avx512f,fma"), always_inline)) static V load(const float* p) {
    return _mm_loadu_ps(p);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V fma(float s, V v, V acc) {
    return _mm_fmadd_ps(_mm_set1_ps(s), v, acc);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static V add(V a, V b) {
    return _mm_add_ps(a, b);
  }
  __attribute__((target("avx512f,fma"), always_inline)) static void store(float* p, V v) {
    _mm_storeu_ps(p, v);
  }
};

template <typename Index, int R, int Rows>
__attribute__((target("avx512f,fma"))) void strip_rows_avx512(const Index* index,
                                                              const float* values, int64_t count,
                                                              const float* a, int64_t a_stride,
                                                              float* out) {
  using L = Lanes<R>;
  // FMAs take 4 cycles and 2 issue per cycle: with fewer than 4 rows, consecutive blocks go to
  // separate sets of sums so that they need not wait on each other.
  constexpr int kWays = Rows >= 4 ? 1 : 4 / Rows;
  typename L::V acc[kWays][Rows];
#pragma GCC unroll 8
  for (int w = 0; w < kWays; ++w)
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) acc[w][r] = L::zero();
  int64_t b = 0;
  for (; b + kWays <= count; b += kWays)
#pragma GCC unroll 8
    for (int w = 0; w < kWays; ++w) {
      const typename L::V v = L::load(values + (b + w) * R);
      const float* x = a + index[b + w];
#pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r) acc[w][r] = L::fma(x[r * a_stride], v, acc[w][r]);
    }
  for (; b < count; ++b) {
    const typename L::V v = L::load(values + b * R);
    const float* x = a + index[b];
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) acc[0][r] = L::fma(x[r * a_stride], v, acc[0][r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 8
    for (int w = 1; w < kWays; ++w) acc[0][r] = L::add(acc[0][r], acc[w][r]);
    L::store(out + r * R, acc[0][r]);
  }
}

template <typename Index, int R>
BlockStripFn<Index> avx512_strip() {
  return strip_by_row_groups<Index, R, strip_rows_avx512<Index, R, 8>,
                             strip_rows_avx512<Index, R, 4>, strip_rows_avx512<Index, R, 2>,
                             strip_rows_avx512<Index, R, 1>>;
}

template <typename Index, int R>
BlockStripFn<Index> avx2_strip() {
  return strip_by_row_groups<Index, R, strip_rows_avx2<Index, R, 8>, strip_rows_avx2<Index, R, 4>,
                             strip_rows_avx2<Index, R, 2>, strip_rows_avx2<Index, R, 1>>;
}

template <typename Index, int R>
BlockStripFn<Index> portable_strip() {
  return strip_by_row_groups<Index, R, strip_rows_portable<Index, R, 8>,
                             strip_rows_portable<Index, R, 4>, strip_rows_portable<Index, R, 2>,
                             strip_rows_portable<Index, R, 1>>;
}

template <typename Index>
BlockStripFn<Index> of_width(int64_t block, BlockStripFn<Index> by16, BlockStripFn<Index> by8,
                             BlockStripFn<Index> by4) {
  switch (block) {
    case 16:
      return by16;
    case 8:
      return by8;
    case 4:
      return by4;
    default:
      fail("no block-sparse loop for blocks of {}", block);
  }
}

}  // namespace

template <typename Index>
BlockStripFn<Index> best_block_strip(int64_t block) {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
    return of_width<Index>(block, avx512_strip<Index, 16>(), avx512_strip<Index, 8>(),
                           avx512_strip<Index, 4>());
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return of_width<Index>(block, avx2_strip<Index, 16>(), avx2_strip<Index, 8>(),
                           avx2_strip<Index, 4>());
  return portable_block_strip<Index>(block);
}

template <typename Index>
BlockStripFn<Index> portable_block_strip(int64_t block) {
  return of_width<Index>(block, portable_strip<Index, 16>(), portable_strip<Index, 8>(),
                         portable_strip<Index, 4>());
}

template BlockStripFn<uint16_t> best_block_strip<uint16_t>(int64_t);
template BlockStripFn<uint32_t> best_block_strip<uint32_t>(int64_t);
template BlockStripFn<uint16_t> portable_block_strip<uint16_t>(int64_t);
template BlockStripFn<uint32_t> portable_block_strip<uint32_t>(int64_t);

}  // namespace sf::sparse
