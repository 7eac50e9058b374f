// The AVX-512 builds of the int8 loops (int8_loops_avx512.cc, compiled on x86-64 only), which
// kernels/int8_loops.cc calls where cpu_features() has AVX-512 F, BW and VL; and what both
// builds share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/parallel_for.h"
#include "kernels/int8_loops.h"

namespace sf::int8_loops {

constexpr int64_t kParallelMin = 1 << 15;  // elements; below this threads cost more than they save

// The vector code covers multipliers below one whose right shift fits an int32 lane (every
// practical requantization); anything else takes the scalar loops.
inline bool vector_friendly(QuantizedMultiplier m) { return m.shift <= 0 && m.shift >= -31; }

// body(i) for each i of [begin, end), split over threads when `worth_threads`. Each thread runs
// its own copy of the body, which captures by value: its constants then stay in registers, where
// read through references they were loaded again after every byte stored (a char store may alias
// anything), and QuantizedAdd ran 1.2x slower. A body inlines into the loop only where both are
// compiled for the same target: int8_loops_avx512.cc has the AVX-512 build of this loop.
template <class Body>
void for_each_index(int64_t begin, int64_t end, bool worth_threads, const Body& body) {
  parallel_for(begin, end, worth_threads, [&](int64_t share_begin, int64_t share_end) {
    const Body own = body;
    for (int64_t i = share_begin; i < share_end; ++i) own(i);
  });
}

// The output pixel (oy, ox)'s window, clipped to the image: rows [r0, r1), columns [c0, c1).
struct PoolWindow {
  int64_t r0, r1, c0, c1;
  int64_t count() const { return (r1 - r0) * (c1 - c0); }
};

inline PoolWindow pool_window_at(const Window2D& g, int64_t oy, int64_t ox) {
  const int64_t r = oy * g.h.stride - g.h.pad_before, c = ox * g.w.stride - g.w.pad_before;
  return {std::max<int64_t>(r, 0), std::min(r + g.h.k, g.h.in), std::max<int64_t>(c, 0),
          std::min(c + g.w.k, g.w.in)};
}

// Output row `row` of a pool over NHWC images, rows counted image by image: the row's image in
// x, its index oy within that image, and its first output pixel in y. Pools go by rows rather
// than pixels: a pixel's three divisions (image, row, column) cost more than a 2x2 window's maxima.
struct PoolRow {
  const uint8_t* image;
  int64_t oy;
  uint8_t* out;
};

inline PoolRow pool_row_at(const uint8_t* x, int64_t channels, const Window2D& g, uint8_t* y,
                           int64_t row) {
  return {x + row / g.h.out * g.h.in * g.w.in * channels, row % g.h.out,
          y + row * g.w.out * channels};
}

inline bool pool_worth_threads(int64_t n, int64_t channels, const Window2D& g) {
  return n * g.h.out * g.w.out * channels >= kParallelMin;
}

inline uint8_t average_value(int64_t sum, int64_t count) {
  return static_cast<uint8_t>((sum + count / 2) / count);
}

#if defined(__x86_64__)
// The same contracts as the functions of kernels/int8_loops.h; requantize_rows_avx512 and
// quantized_add_avx512 only for vector_friendly multipliers.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void requantize_rows_avx512(
    const int32_t* acc, int64_t rows, int64_t channels,
    const std::vector<QuantizedMultiplier>& multipliers, int32_t zero_point, QuantClamp clamp,
    uint8_t* out);
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantized_add_avx512(
    const uint8_t* a, const uint8_t* b, int64_t count, const QuantizedAddParams& p, uint8_t* out);
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_avx512(const float* x,
                                                                          int64_t count,
                                                                          QuantParams p,
                                                                          uint8_t* out);
__attribute__((target("avx512f,avx512bw,avx512vl"))) void dequantize_avx512(const uint8_t* q,
                                                                            int64_t count,
                                                                            QuantParams p,
                                                                            float* out);
__attribute__((target("avx512f,avx512bw,avx512vl"))) FloatRange finite_range_avx512(const float* x,
                                                                                    int64_t count);
__attribute__((target("avx512f,avx512bw,avx512vl"))) void channel_ranges_avx512(
    const int32_t* acc, int64_t rows, int64_t channels, int32_t* lo, int32_t* hi);
__attribute__((target("avx512f,avx512bw,avx512vl"))) void average_pool_avx512(
    const uint8_t* x, int64_t n, int64_t channels, const Window2D& g, uint8_t* y);
__attribute__((target("avx512f,avx512bw,avx512vl"))) void max_pool_avx512(
    const uint8_t* x, int64_t n, int64_t channels, const Window2D& g, uint8_t* y);
// Also needs AVX-512 VBMI.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) void concat_rows_avx512(
    const std::vector<ConcatPart>& parts, int64_t outer, int64_t y_row, uint8_t* y);
#endif

}  // namespace sf::int8_loops
