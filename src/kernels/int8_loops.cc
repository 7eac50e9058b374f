#include "kernels/int8_loops.h"

#include <algorithm>
#include <cmath>

#include "cpu/cpu_features.h"
#include "cpu/parallel_for.h"
#include "kernels/int8_loops_avx512.h"

namespace sf {

using namespace int8_loops;

namespace {

#if defined(__x86_64__)
bool has_avx512() {
  const CpuFeatures& cpu = cpu_features();
  return cpu.avx512f && cpu.avx512bw && cpu.avx512vl;
}
#endif

}  // namespace

void requantize_rows(const int32_t* acc, int64_t rows, int64_t channels,
                     const std::vector<QuantizedMultiplier>& multipliers, int32_t zero_point,
                     QuantClamp clamp, uint8_t* out) {
#if defined(__x86_64__)
  bool vector = has_avx512();
  for (const QuantizedMultiplier& m : multipliers) vector = vector && vector_friendly(m);
  if (vector)
    return requantize_rows_avx512(acc, rows, channels, multipliers, zero_point, clamp, out);
#endif
  parallel_for(
      0, rows, rows * channels >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
        for (int64_t r = share_begin; r < share_end; ++r)
          for (int64_t j = 0; j < channels; ++j)
            out[r * channels + j] = requantize_value(
                acc[r * channels + j], multipliers[static_cast<size_t>(j)], zero_point, clamp);
      });
}

void quantized_add_elements(const uint8_t* a, const uint8_t* b, int64_t count,
                            const QuantizedAddParams& p, uint8_t* out) {
#if defined(__x86_64__)
  if (has_avx512() && vector_friendly(p.a) && vector_friendly(p.b) && vector_friendly(p.out))
    return quantized_add_avx512(a, b, count, p, out);
#endif
  parallel_for(0, count, count >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t i = share_begin; i < share_end; ++i) out[i] = quantized_add_value(a[i], b[i], p);
  });
}

void quantize_elements(const float* x, int64_t count, QuantParams p, uint8_t* out) {
#if defined(__x86_64__)
  if (has_avx512()) return quantize_avx512(x, count, p, out);
#endif
  parallel_for(0, count, count >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t i = share_begin; i < share_end; ++i) out[i] = quantize_value(x[i], p);
  });
}

void dequantize_elements(const uint8_t* q, int64_t count, QuantParams p, float* out) {
#if defined(__x86_64__)
  if (has_avx512()) return dequantize_avx512(q, count, p, out);
#endif
  parallel_for(0, count, count >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
    for (int64_t i = share_begin; i < share_end; ++i) out[i] = dequantize_value(q[i], p);
  });
}

FloatRange finite_range(const float* x, int64_t count) {
#if defined(__x86_64__)
  if (has_avx512()) return finite_range_avx512(x, count);
#endif
  FloatRange r;
  for (int64_t i = 0; i < count; ++i)
    if (std::isfinite(x[i])) {
      r.lo = std::min(r.lo, x[i]);
      r.hi = std::max(r.hi, x[i]);
    }
  return r;
}

void concat_rows(const std::vector<ConcatPart>& parts, int64_t outer, int64_t y_row, uint8_t* y) {
#if defined(__x86_64__)
  if (has_avx512() && cpu_features().avx512_vbmi) return concat_rows_avx512(parts, outer, y_row, y);
#endif
  parallel_for(0, outer, outer * y_row >= kParallelMin, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* out = y + r * y_row;
      for (const ConcatPart& part : parts) {
        const uint8_t* x = part.x + r * part.row;
        if (part.table == nullptr)
          std::copy_n(x, part.row, out);
        else
          for (int64_t i = 0; i < part.row; ++i) out[i] = part.table[x[i]];
        out += part.row;
      }
    }
  });
}

void average_pool(const uint8_t* x, int64_t n, int64_t channels, const Window2D& g, uint8_t* y) {
#if defined(__x86_64__)
  if (has_avx512()) return average_pool_avx512(x, n, channels, g, y);
#endif
  for_each_index(0, n * g.h.out, pool_worth_threads(n, channels, g), [=](int64_t index) {
    const PoolRow row = pool_row_at(x, channels, g, y, index);
    for (int64_t ox = 0; ox < g.w.out; ++ox) {
      const PoolWindow win = pool_window_at(g, row.oy, ox);
      for (int64_t j = 0; j < channels; ++j) {
        int64_t sum = 0;
        for (int64_t r = win.r0; r < win.r1; ++r)
          for (int64_t c = win.c0; c < win.c1; ++c)
            sum += row.image[(r * g.w.in + c) * channels + j];
        row.out[ox * channels + j] = average_value(sum, win.count());
      }
    }
  });
}

void max_pool(const uint8_t* x, int64_t n, int64_t channels, const Window2D& g, uint8_t* y) {
  // oneDNN's u8 pooling took 25-38 ns per output pixel of a 2x2/2 pool of 28x28x32 (Deep-MNIST's,
  // squeezenet-mnist's).
#if defined(__x86_64__)
  if (has_avx512()) return max_pool_avx512(x, n, channels, g, y);
#endif
  for_each_index(0, n * g.h.out, pool_worth_threads(n, channels, g), [=](int64_t index) {
    const PoolRow row = pool_row_at(x, channels, g, y, index);
    for (int64_t ox = 0; ox < g.w.out; ++ox) {
      const PoolWindow win = pool_window_at(g, row.oy, ox);
      uint8_t* out = row.out + ox * channels;
      std::fill(out, out + channels, uint8_t{0});
      for (int64_t r = win.r0; r < win.r1; ++r)
        for (int64_t c = win.c0; c < win.c1; ++c) {
          const uint8_t* in = row.image + (r * g.w.in + c) * channels;
          for (int64_t j = 0; j < channels; ++j) out[j] = std::max(out[j], in[j]);
        }
    }
  });
}

void channel_ranges(const int32_t* acc, int64_t rows, int64_t channels, int32_t* lo, int32_t* hi) {
#if defined(__x86_64__)
  if (has_avx512()) return channel_ranges_avx512(acc, rows, channels, lo, hi);
#endif
  std::copy(acc, acc + channels, lo);
  std::copy(acc, acc + channels, hi);
  for (int64_t r = 1; r < rows; ++r)
    for (int64_t j = 0; j < channels; ++j) {
      lo[j] = std::min(lo[j], acc[r * channels + j]);
      hi[j] = std::max(hi[j], acc[r * channels + j]);
    }
}

}  // namespace sf
