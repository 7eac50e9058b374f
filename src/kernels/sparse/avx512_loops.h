// The AVX-512 loops of the sparse kernels, defined in the *_avx512.cc files beside this one,
// which CMake compiles on x86-64 only. Their portable twins' files pick them at run time, under
// `#if defined(__x86_64__)`, where cpu_features() has the subsets each one's target names.
#pragma once

#if defined(__x86_64__)
#include <cstdint>

#include "kernels/sparse/block_product.h"
#include "kernels/sparse/int8_sparse_product.h"
#include "kernels/sparse/sparse_accumulate.h"

namespace sf::sparse {

// best_accumulate()'s loop with a whole chunk's sums in registers.
template <typename Index>
__attribute__((target("avx512f"))) void accumulate_avx512(const float* src, const Index* index,
                                                          int64_t stride, const float* values,
                                                          int64_t count, int64_t len, float* out);

// The block strip for blocks of R (16, 8 or 4) outputs; needs AVX-512 F and FMA.
template <typename Index, int R>
BlockStripFn<Index> avx512_block_strip();

// The quad loops of int8_sparse_product.h, and a run accumulate that interleaves the inputs of
// four nonzeros so that one vpdpbusd adds four products to each sum.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void quad_strip_vnni(
    const uint32_t* rows, const int8_t* values, int64_t quads, const uint8_t* x, int32_t* out);
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void quad_runs_vnni(
    const uint32_t* rows, const int8_t* values, int64_t quads, const uint8_t* src, int64_t len,
    int32_t* out);
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void int8_accumulate_vnni(
    const uint8_t* src, const uint32_t* index, int64_t stride, const int8_t* values, int64_t count,
    int64_t len, int32_t* out);

// Int8Outputs::accumulators for 16 channels, their int64 offsets at `offsets`.
__attribute__((target("avx512f"))) void accumulators_16_avx512(
    const int32_t* sums, int64_t pixel_stride, int64_t channel_stride, int64_t pixels,
    const int64_t* offsets, int32_t* out, int64_t out_stride);

}  // namespace sf::sparse

#endif
