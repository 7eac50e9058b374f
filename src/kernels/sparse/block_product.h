// The inner loop of the block-sparse MatMul: one strip of R adjacent outputs for a group of rows,
//
//   out[r, 0..R) = sum over b < count of a[r * a_stride + index[b]] * values[b * R + (0..R)]
//
// Each block costs one load of its input and one vector load of its R values, however many of
// them are nonzero; with several rows, one load of the values serves them all.
#pragma once

#include <cstdint>

namespace sf::sparse {

// The block widths there are loops for.
inline constexpr int64_t kBlockWidths[] = {16, 8, 4};

template <typename Index>
using BlockStripFn = void (*)(const Index* index, const float* values, int64_t count,
                              const float* a, int64_t a_stride, int64_t rows, float* out);

// Every build of the strip loop comes for 8, 4, 2 and 1 rows at once, so that a group of rows
// keeps all its sums in registers; any number of rows is cut into such groups.
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

// The fastest version this CPU runs (AVX-512, AVX2 or portable) for `block` (one of
// kBlockWidths), chosen at run time.
template <typename Index>
BlockStripFn<Index> best_block_strip(int64_t block);

// The portable version, for tests to compare against.
template <typename Index>
BlockStripFn<Index> portable_block_strip(int64_t block);

}  // namespace sf::sparse
