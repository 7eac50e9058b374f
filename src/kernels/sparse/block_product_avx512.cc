// The AVX-512 build of block_product.h's strip loop: 16 outputs fill a 512-bit register, 8 and 4
// a 256- and 128-bit one.
#include <immintrin.h>

#include "kernels/sparse/avx512_loops.h"

namespace sf::sparse {

namespace {

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

}  // namespace

template <typename Index, int R>
BlockStripFn<Index> avx512_block_strip() {
  return strip_by_row_groups<Index, R, strip_rows_avx512<Index, R, 8>,
                             strip_rows_avx512<Index, R, 4>, strip_rows_avx512<Index, R, 2>,
                             strip_rows_avx512<Index, R, 1>>;
}

template BlockStripFn<uint16_t> avx512_block_strip<uint16_t, 16>();
template BlockStripFn<uint16_t> avx512_block_strip<uint16_t, 8>();
template BlockStripFn<uint16_t> avx512_block_strip<uint16_t, 4>();
template BlockStripFn<uint32_t> avx512_block_strip<uint32_t, 16>();
template BlockStripFn<uint32_t> avx512_block_strip<uint32_t, 8>();
template BlockStripFn<uint32_t> avx512_block_strip<uint32_t, 4>();

}  // namespace sf::sparse
