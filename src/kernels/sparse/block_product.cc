// Three builds of the strip loop, as in sparse_accumulate.cc: AVX-512 intrinsics
// (block_product_avx512.cc), and the portable loop compiled for AVX2 and for the baseline ISA.
#include "kernels/sparse/block_product.h"

#include <algorithm>

#include "core/error.h"
#include "cpu/cpu_features.h"
#include "kernels/sparse/avx512_loops.h"

namespace sf::sparse {

namespace {

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

#if defined(__x86_64__)
template <typename Index, int R, int Rows>
__attribute__((target("avx2,fma"))) void strip_rows_avx2(const Index* index, const float* values,
                                                         int64_t count, const float* a,
                                                         int64_t a_stride, float* out) {
  strip_rows_loop<Index, R, Rows>(index, values, count, a, a_stride, out);
}

template <typename Index, int R>
BlockStripFn<Index> avx2_strip() {
  return strip_by_row_groups<Index, R, strip_rows_avx2<Index, R, 8>, strip_rows_avx2<Index, R, 4>,
                             strip_rows_avx2<Index, R, 2>, strip_rows_avx2<Index, R, 1>>;
}
#endif

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
#if defined(__x86_64__)
  const CpuFeatures& cpu = cpu_features();
  if (cpu.avx512f && cpu.fma)
    return of_width<Index>(block, avx512_block_strip<Index, 16>(), avx512_block_strip<Index, 8>(),
                           avx512_block_strip<Index, 4>());
  if (cpu.avx2 && cpu.fma)
    return of_width<Index>(block, avx2_strip<Index, 16>(), avx2_strip<Index, 8>(),
                           avx2_strip<Index, 4>());
#endif
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
