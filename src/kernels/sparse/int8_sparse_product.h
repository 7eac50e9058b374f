// The inner loops of the int8 sparse MatMul: u8 activations times i8 weights, summed exactly in
// int32. They leave the activations' zero point out (the kernel subtracts zero_point * the sum of
// each output's weights once per output), so every product is of two raw codes.
//
// The caller guarantees that no sum can overflow: 255 * sum over k of |w[k, n]| < 2^31 for every
// output n (sums_fit_int32).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/sparse/sparse_weights.h"

namespace sf::sparse {

// One sparse dot product of CSR weights with a u8 row: sum over j < count of values[j] *
// x[index[j]]. Batch-1 MatMul spends its time here; bound by its three loads per nonzero like
// the fp32 sparse_dot, so four independent scalar sums.
template <typename Index>
inline int32_t sparse_dot_u8(const Index* index, const int8_t* values, int64_t count,
                             const uint8_t* x) {
  int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    s0 += values[j] * int32_t{x[index[j]]};
    s1 += values[j + 1] * int32_t{x[index[j + 1]]};
    s2 += values[j + 2] * int32_t{x[index[j + 2]]};
    s3 += values[j + 3] * int32_t{x[index[j + 3]]};
  }
  for (; j < count; ++j) s0 += values[j] * int32_t{x[index[j]]};
  return (s0 + s1) + (s2 + s3);
}

// Several rows or pixels: out[0, len) = sum over j < count of
// values[j] * src[index[j] * stride + [0, len)], src being a block of `len` rows transposed to
// [K, len] (stride len: MatMul), or a conv's split input layout with an offset per tap
// (stride 1), so one weight serves every row or pixel.
template <typename Index>
using Int8AccumulateFn = void (*)(const uint8_t* src, const Index* index, int64_t stride,
                                  const int8_t* values, int64_t count, int64_t len, int32_t* out);

// The fastest version this CPU runs (AVX-512, AVX2 or portable), chosen at run time.
template <typename Index>
Int8AccumulateFn<Index> best_int8_accumulate();

// The portable version, for tests to compare against.
template <typename Index>
Int8AccumulateFn<Index> portable_int8_accumulate();

// For long runs (a conv's output image): on CPUs with AVX-512 VNNI, a version that interleaves
// the inputs of four nonzeros byte by byte so that one vpdpbusd adds four products to each of 16
// sums (the compiled loop widens every input to int32 and multiplies it alone); elsewhere
// best_int8_accumulate().
Int8AccumulateFn<uint32_t> best_int8_run_accumulate();

// Weights pruned in blocks of 16 adjacent outputs, for VNNI: each strip of 16 outputs keeps its
// nonzero blocks in groups of four ("quads", the last padded with zero blocks), whose 4 x 16
// values are interleaved so that one vpdpbusd multiplies the four inputs x[k0..k3] by them and
// adds the 16 sums: 64 multiply-adds per instruction, as dense int8 kernels do.
inline constexpr int64_t kQuadBlock = 16;
inline constexpr int64_t kQuadDepth = 4;

struct BlockQuads {
  int64_t strips = 0;                // ceil(N / 16)
  std::vector<int64_t> strip_start;  // strips + 1 entries into rows / values, counted in quads
  std::vector<uint32_t> rows;        // 4 per quad: the k of each block (0 for padding)
  std::vector<int8_t> values;        // 64 per quad: value of block b, output i at [i * 4 + b]

  int64_t quads() const { return static_cast<int64_t>(rows.size()) / kQuadDepth; }
};

// Regroups the blocks of 16 outputs of each strip into quads, interleaving their values.
BlockQuads quads_of(const BlockCsr<uint32_t, int8_t>& blocks);

// out[0, 16) = sum over the `quads` quads of a strip of x[k_b] * values, from `rows` and `values`
// of its first quad.
using QuadStripFn = void (*)(const uint32_t* rows, const int8_t* values, int64_t quads,
                             const uint8_t* x, int32_t* out);

// A strip's quads over the runs of a conv's split input layout (rows are offsets into it):
// out[p * 16 + i] = sum over the quads' blocks b of values[i * 4 + b] * src[row_b + p] for
// p < len, i.e. the strip's 16 sums at each position of the run, position-major.
using QuadRunsFn = void (*)(const uint32_t* rows, const int8_t* values, int64_t quads,
                            const uint8_t* src, int64_t len, int32_t* out);

// With VNNI: 16 positions at a time, the four inputs of a quad interleaved into the dwords of one
// vector and multiplied by each output's four weights (one dword of the quad) with one vpdpbusd
// per output, then the 16 x 16 sums transposed. The portable version elsewhere.
QuadRunsFn best_quad_runs();
QuadRunsFn portable_quad_runs();

// Whether this CPU has AVX-512 VNNI (with the F, BW and VL subsets the loops also use), which
// the quad form is measured with and made for.
bool has_avx512_vnni();

// The VNNI version where the CPU has it, the portable one otherwise.
QuadStripFn best_quad_strip();

// The portable version, for tests to compare against.
QuadStripFn portable_quad_strip();

}  // namespace sf::sparse
