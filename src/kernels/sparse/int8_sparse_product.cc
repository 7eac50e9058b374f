// The batched accumulate is one portable loop compiled for AVX-512, AVX2 and the baseline ISA
// (picked at run time, as sparse_accumulate.cc does); the quad loops are vpdpbusd intrinsics
// (int8_sparse_product_avx512.cc) with scalar twins for CPUs without VNNI and for tests.
#include "kernels/sparse/int8_sparse_product.h"

#include <algorithm>

#include "cpu/cpu_features.h"
#include "kernels/sparse/avx512_loops.h"

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

#if defined(__x86_64__)
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
#endif

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
  const CpuFeatures& cpu = cpu_features();
  return cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512_vnni;
}

QuadStripFn best_quad_strip() {
#if defined(__x86_64__)
  if (has_avx512_vnni()) return quad_strip_vnni;
#endif
  return quad_strip_portable;
}

QuadStripFn portable_quad_strip() { return quad_strip_portable; }

QuadRunsFn best_quad_runs() {
#if defined(__x86_64__)
  if (has_avx512_vnni()) return quad_runs_vnni;
#endif
  return quad_runs_portable;
}

QuadRunsFn portable_quad_runs() { return quad_runs_portable; }

template <typename Index>
Int8AccumulateFn<Index> best_int8_accumulate() {
#if defined(__x86_64__)
  const CpuFeatures& cpu = cpu_features();
  if (cpu.avx512f && cpu.avx512bw) return int8_accumulate_avx512<Index>;
  if (cpu.avx2) return int8_accumulate_avx2<Index>;
#endif
  return int8_accumulate_portable<Index>;
}

Int8AccumulateFn<uint32_t> best_int8_run_accumulate() {
#if defined(__x86_64__)
  if (has_avx512_vnni()) return int8_accumulate_vnni;
#endif
  return best_int8_accumulate<uint32_t>();
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
