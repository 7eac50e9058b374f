#include "kernels/float_loops_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/avx512_lanes.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports once they are inlined (as in kernels/int8_loops_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sf::float_loops {

namespace {

// The maxima of kVectors channel vectors from `c` over one window (rows [r_begin, r_end),
// columns [c_begin, c_end)), taps in row-major order as the reference takes them. The vectors
// run side by side: one max after another on a single vector waits on its latency.
template <int kVectors>
__attribute__((target("avx512f"))) inline void window_max(const float* image, int64_t row_floats,
                                                          int64_t channels, int64_t c,
                                                          int64_t r_begin, int64_t r_end,
                                                          int64_t c_begin, int64_t c_end,
                                                          float* y) {
  __mmask16 m[kVectors];
  __m512 acc[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    m[v] = lanes16(c + 16 * v, channels);
    acc[v] = _mm512_set1_ps(-INFINITY);
  }
  // max_ps(a, b) is a > b ? a : b, the reference's std::max(acc, a): NaN never wins.
  for (int64_t r = r_begin; r < r_end; ++r) {
    const float* row = image + r * row_floats + c;
    for (int64_t col = c_begin; col < c_end; ++col)
      for (int v = 0; v < kVectors; ++v)
        acc[v] = _mm512_max_ps(load16(row + col * channels + 16 * v, m[v]), acc[v]);
  }
  for (int v = 0; v < kVectors; ++v) store16(y + c + 16 * v, m[v], acc[v]);
}

// The columns of one output window along a row: where it starts (negative in padding) and the
// input columns [begin, end) it covers.
struct WindowColumns {
  int64_t first, begin, end;
};

// Calls visit(std::integral_constant<int, V>{}, ox, c, columns) for each window ox of an output
// row and each run of V <= 4 channel vectors from channel c: the window kernels keep their V
// vectors side by side in registers.
template <typename Visit>
__attribute__((target("avx512f"))) inline void for_each_window_run(const Window2D& g,
                                                                   int64_t channels,
                                                                   Visit&& visit) {
  for (int64_t ox = 0; ox < g.w.out; ++ox) {
    const int64_t c0 = ox * g.w.stride - g.w.pad_before;
    const WindowColumns columns{c0, std::max<int64_t>(c0, 0), std::min(c0 + g.w.k, g.w.in)};
    for (int64_t c = 0; c < channels; c += 64) {
      switch (std::min<int64_t>(4, (channels - c + 15) / 16)) {
        case 4:
          visit(std::integral_constant<int, 4>{}, ox, c, columns);
          break;
        case 3:
          visit(std::integral_constant<int, 3>{}, ox, c, columns);
          break;
        case 2:
          visit(std::integral_constant<int, 2>{}, ox, c, columns);
          break;
        default:
          visit(std::integral_constant<int, 1>{}, ox, c, columns);
      }
    }
  }
}

}  // namespace

__attribute__((target("avx512f"))) void max_pool_row_avx512(const float* image, int64_t channels,
                                                            const Window2D& g, int64_t r_begin,
                                                            int64_t r_end, float* y_row) {
  const int64_t row_floats = g.w.in * channels;
  for_each_window_run(
      g, channels,
      [&](auto vectors, int64_t ox, int64_t c, const WindowColumns& w)
          __attribute__((target("avx512f"))) {
            window_max<decltype(vectors)::value>(image, row_floats, channels, c, r_begin, r_end,
                                                 w.begin, w.end, y_row + ox * channels);
          });
}

namespace {

// One window's MaxPoolGrad for kVectors channel vectors from `c`, side by side as in
// window_max: the first tap in row-major order whose x equals y gets dy (with relu, only where
// y > 0), every other tap 0.
template <int kVectors>
__attribute__((target("avx512f"))) inline void window_route(
    const float* x_image, float* dx_image, int64_t row_floats, int64_t channels, int64_t c,
    int64_t r_begin, int64_t r_end, int64_t c_begin, int64_t c_end, const float* y,
    const float* dy, bool relu) {
  __mmask16 m[kVectors], open[kVectors];
  __m512 yv[kVectors], dyv[kVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) {
    m[v] = lanes16(c + 16 * v, channels);
    yv[v] = load16(y + c + 16 * v, m[v]);
    const __mmask16 passed =
        relu ? _mm512_mask_cmp_ps_mask(m[v], yv[v], _mm512_setzero_ps(), _CMP_GT_OQ) : m[v];
    dyv[v] = _mm512_maskz_loadu_ps(passed, dy + c + 16 * v);
    open[v] = m[v];
  }
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int64_t row = r * row_floats + c;
    for (int64_t col = c_begin; col < c_end; ++col)
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        const int64_t at = row + col * channels + 16 * v;
        const __mmask16 hit = _mm512_mask_cmp_ps_mask(
            open[v], load16(x_image + at, m[v]), yv[v], _CMP_EQ_OQ);
        open[v] = static_cast<__mmask16>(open[v] & ~hit);
        store16(dx_image + at, m[v], _mm512_maskz_mov_ps(hit, dyv[v]));
      }
  }
}

}  // namespace

__attribute__((target("avx512f"))) void max_pool_grad_row_avx512(
    const float* x_image, const float* y_row, const float* dy_row, int64_t channels,
    const Window2D& g, int64_t r_begin, int64_t r_end, bool relu, float* dx_image) {
  const int64_t row_floats = g.w.in * channels;
  for_each_window_run(
      g, channels,
      [&](auto vectors, int64_t ox, int64_t c, const WindowColumns& w)
          __attribute__((target("avx512f"))) {
            window_route<decltype(vectors)::value>(
                x_image, dx_image, row_floats, channels, c, r_begin, r_end, w.begin, w.end,
                y_row + ox * channels, dy_row + ox * channels, relu);
          });
}

namespace {

// Sixteen u8 window positions from p, widened to 32-bit lanes (the lanes past a ragged end 0).
__attribute__((target("avx512f"))) inline __m512i load_positions(const uint8_t* p,
                                                                 __mmask16 lanes) {
  if (lanes == 0xFFFF)
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) uint8_t part[16] = {};
  std::memcpy(part, p, static_cast<size_t>(__builtin_popcount(lanes)));
  return _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(part)));
}

// One window's MaxPoolWindowArgmax for kVectors channel vectors from `c`, side by side as in
// window_max: the maximum first (NaN skipped, as there), then the taps in reverse order, each
// equal to it recording its position over the later ones', which leaves the first. Comparing
// to the running maximum tap by tap instead chains a compare and two blends per tap, twice as
// slow on Deep-MNIST's 2x2 pools.
template <int kVectors>
__attribute__((target("avx512f"))) inline void window_argmax(
    const float* image, int64_t row_floats, int64_t channels, int64_t c, int64_t r0,
    int64_t r_begin, int64_t r_end, int64_t c0, int64_t c_begin, int64_t c_end, int64_t kw,
    bool relu, float* y, uint8_t* argmax) {
  const __m512i none = _mm512_set1_epi32(kNoWindowArgmax);
  __mmask16 m[kVectors];
  __m512 best[kVectors];
  __m512i at[kVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) {
    m[v] = lanes16(c + 16 * v, channels);
    best[v] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    at[v] = none;
  }
  if (r_end - r_begin == 2 && c_end - c_begin == 2 && r_begin == r0 && c_begin == c0 && kw == 2) {
    // A whole 2x2 window (training's pools), unrolled: its loops cost as much as its work.
    const float* top = image + r_begin * row_floats + c_begin * channels + c;
    const float* bottom = top + row_floats;
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      const __m512 x0 = load16(top + 16 * v, m[v]), x1 = load16(top + channels + 16 * v, m[v]);
      const __m512 x2 = load16(bottom + 16 * v, m[v]);
      const __m512 x3 = load16(bottom + channels + 16 * v, m[v]);
      best[v] = _mm512_max_ps(x3, _mm512_max_ps(x2, _mm512_max_ps(x1, _mm512_max_ps(x0, best[v]))));
      at[v] = _mm512_mask_mov_epi32(at[v], _mm512_cmp_ps_mask(x3, best[v], _CMP_EQ_OQ),
                                    _mm512_set1_epi32(3));
      at[v] = _mm512_mask_mov_epi32(at[v], _mm512_cmp_ps_mask(x2, best[v], _CMP_EQ_OQ),
                                    _mm512_set1_epi32(2));
      at[v] = _mm512_mask_mov_epi32(at[v], _mm512_cmp_ps_mask(x1, best[v], _CMP_EQ_OQ),
                                    _mm512_set1_epi32(1));
      at[v] = _mm512_mask_mov_epi32(at[v], _mm512_cmp_ps_mask(x0, best[v], _CMP_EQ_OQ),
                                    _mm512_setzero_si512());
    }
    r_end = r_begin;  // nothing left for the general loops below
  }
  for (int64_t r = r_begin; r < r_end; ++r)
    for (int64_t col = c_begin; col < c_end; ++col) {
      const float* tap = image + r * row_floats + col * channels + c;
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v)
        best[v] = _mm512_max_ps(load16(tap + 16 * v, m[v]), best[v]);
    }
  for (int64_t r = r_end - 1; r >= r_begin; --r)
    for (int64_t col = c_end - 1; col >= c_begin; --col) {
      const __m512i position = _mm512_set1_epi32(static_cast<int>((r - r0) * kw + col - c0));
      const float* tap = image + r * row_floats + col * channels + c;
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) {
        const __mmask16 hit = _mm512_cmp_ps_mask(load16(tap + 16 * v, m[v]), best[v], _CMP_EQ_OQ);
        at[v] = _mm512_mask_mov_epi32(at[v], hit, position);
      }
    }
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) {
    if (relu) {
      const __mmask16 positive = _mm512_cmp_ps_mask(best[v], _mm512_setzero_ps(), _CMP_GT_OQ);
      at[v] = _mm512_mask_mov_epi32(at[v], static_cast<__mmask16>(~positive), none);
    }
    store16(y + c + 16 * v, m[v], best[v]);
    if (m[v] == 0xFFFF)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(argmax + c + 16 * v),
                       _mm512_cvtepi32_epi8(at[v]));
    else
      _mm512_mask_cvtepi32_storeu_epi8(argmax + c + 16 * v, m[v], at[v]);
  }
}

// One window's MaxPoolGradWindowArgmax for kVectors channel vectors from `c`: dy where the tap
// is the recorded position, 0 at the others.
template <int kVectors>
__attribute__((target("avx512f"))) inline void window_scatter(
    float* dx_image, int64_t row_floats, int64_t channels, int64_t c, int64_t r0, int64_t r_begin,
    int64_t r_end, int64_t c0, int64_t c_begin, int64_t c_end, int64_t kw, const float* dy,
    const uint8_t* argmax) {
  __mmask16 m[kVectors];
  __m512 dyv[kVectors];
  __m512i at[kVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) {
    m[v] = lanes16(c + 16 * v, channels);
    dyv[v] = load16(dy + c + 16 * v, m[v]);
    at[v] = load_positions(argmax + c + 16 * v, m[v]);
  }
  for (int64_t r = r_begin; r < r_end; ++r)
    for (int64_t col = c_begin; col < c_end; ++col) {
      const __m512i position = _mm512_set1_epi32(static_cast<int>((r - r0) * kw + col - c0));
      float* tap = dx_image + r * row_floats + col * channels + c;
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v)
        store16(tap + 16 * v, m[v],
                _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at[v], position), dyv[v]));
    }
}

}  // namespace

__attribute__((target("avx512f"))) void max_pool_window_argmax_row_avx512(
    const float* image, int64_t channels, const Window2D& g, int64_t r0, bool relu, float* y_row,
    uint8_t* argmax_row) {
  const int64_t row_floats = g.w.in * channels;
  const int64_t r_begin = std::max<int64_t>(r0, 0), r_end = std::min(r0 + g.h.k, g.h.in);
  for_each_window_run(
      g, channels,
      [&](auto vectors, int64_t ox, int64_t c, const WindowColumns& w)
          __attribute__((target("avx512f"))) {
            window_argmax<decltype(vectors)::value>(
                image, row_floats, channels, c, r0, r_begin, r_end, w.first, w.begin, w.end, g.w.k,
                relu, y_row + ox * channels, argmax_row + ox * channels);
          });
}

__attribute__((target("avx512f"))) void max_pool_grad_window_argmax_row_avx512(
    const float* dy_row, const uint8_t* argmax_row, int64_t channels, const Window2D& g, int64_t r0,
    float* dx_image) {
  const int64_t row_floats = g.w.in * channels;
  const int64_t r_begin = std::max<int64_t>(r0, 0), r_end = std::min(r0 + g.h.k, g.h.in);
  for_each_window_run(
      g, channels,
      [&](auto vectors, int64_t ox, int64_t c, const WindowColumns& w)
          __attribute__((target("avx512f"))) {
            window_scatter<decltype(vectors)::value>(
                dx_image, row_floats, channels, c, r0, r_begin, r_end, w.first, w.begin, w.end,
                g.w.k, dy_row + ox * channels, argmax_row + ox * channels);
          });
}

__attribute__((target("avx512f"))) void route_to_first_max_avx512(
    const float* const* x_taps, float* const* dx_taps, int64_t count, int64_t channels,
    const float* y, const float* dy, bool relu, bool accumulate) {
  for (int64_t c = 0; c < channels; c += 16) {
    const __mmask16 m = lanes16(c, channels);
    const __m512 yv = load16(y + c, m);
    const __mmask16 passed =
        relu ? _mm512_mask_cmp_ps_mask(m, yv, _mm512_setzero_ps(), _CMP_GT_OQ) : m;
    const __m512 dyv = _mm512_maskz_loadu_ps(passed, dy + c);
    __mmask16 open = m;  // channels whose maximum is not found yet
    for (int64_t t = 0; t < count; ++t) {
      const __mmask16 hit =
          _mm512_mask_cmp_ps_mask(open, load16(x_taps[t] + c, m), yv, _CMP_EQ_OQ);
      open = static_cast<__mmask16>(open & ~hit);
      float* d = dx_taps[t] + c;
      if (accumulate) {
        const __m512 dv = load16(d, m);
        store16(d, m, _mm512_mask_add_ps(dv, hit, dv, dyv));
      } else {
        store16(d, m, _mm512_maskz_mov_ps(hit, dyv));
      }
    }
  }
}

namespace {

// The sums of kTaps adjacent taps of one filter row (columns fc0.., dilation dw apart) for 32
// outputs from o0, over every output pixel, in 2 * kTaps registers: one broadcast of x and two
// FMAs per tap and pixel, dy's row loaded once per pixel.
template <int kTaps>
__attribute__((target("avx512f"))) void tap_row_sums(const float* padded, int64_t row_stride,
                                                     const float* dy, int64_t outputs,
                                                     int64_t o0, const Window2D& g, int64_t fr,
                                                     int64_t fc0, float* sums, int64_t stride) {
  const __mmask16 m0 = lanes16(o0, outputs);
  const __mmask16 m1 = o0 + 16 < outputs ? lanes16(o0 + 16, outputs) : static_cast<__mmask16>(0);
  // Two arrays indexed by unrolled constants: GCC keeps these in registers, where an
  // acc[kTaps][2] went to the stack and back at every pixel (4x slower).
  __m512 low[kTaps], high[kTaps];
#pragma GCC unroll 8
  for (int j = 0; j < kTaps; ++j) low[j] = high[j] = _mm512_setzero_ps();
  const int64_t dw = g.w.dilation;
  for (int64_t oy = 0; oy < g.h.out; ++oy) {
    const float* row = padded + (oy * g.h.stride + fr * g.h.dilation) * row_stride + fc0 * dw;
    const float* d = dy + oy * g.w.out * outputs + o0;
    for (int64_t ox = 0; ox < g.w.out; ++ox, d += outputs) {
      const __m512 d0 = load16(d, m0), d1 = load16(d + 16, m1);
      const float* tap = row + ox * g.w.stride;
#pragma GCC unroll 8
      for (int j = 0; j < kTaps; ++j) {
        const __m512 xv = _mm512_set1_ps(tap[j * dw]);
        low[j] = _mm512_fmadd_ps(xv, d0, low[j]);
        high[j] = _mm512_fmadd_ps(xv, d1, high[j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < kTaps; ++j) {
    float* s = sums + (fr * g.w.k + fc0 + j) * stride + o0;
    _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), low[j]));
    if (m1 != 0) _mm512_storeu_ps(s + 16, _mm512_add_ps(_mm512_loadu_ps(s + 16), high[j]));
  }
}

}  // namespace

__attribute__((target("avx512f"))) void single_channel_filter_sums_avx512(
    const float* padded, int64_t row_stride, const float* dy, int64_t outputs, const Window2D& g,
    float* sums) {
  const int64_t stride = (outputs + 15) / 16 * 16;
  // Filter rows in runs of up to six taps, 32 outputs at a time: twelve accumulators stay in
  // registers through all the image's pixels (sums in memory were 5x slower).
  for (int64_t o0 = 0; o0 < outputs; o0 += 32)
    for (int64_t fr = 0; fr < g.h.k; ++fr)
      for (int64_t fc0 = 0; fc0 < g.w.k; fc0 += 6) {
        auto run = [&](auto taps) {
          tap_row_sums<decltype(taps)::value>(padded, row_stride, dy, outputs, o0, g, fr, fc0,
                                              sums, stride);
        };
        switch (std::min<int64_t>(6, g.w.k - fc0)) {
          case 1: run(std::integral_constant<int, 1>{}); break;
          case 2: run(std::integral_constant<int, 2>{}); break;
          case 3: run(std::integral_constant<int, 3>{}); break;
          case 4: run(std::integral_constant<int, 4>{}); break;
          case 5: run(std::integral_constant<int, 5>{}); break;
          default: run(std::integral_constant<int, 6>{}); break;
        }
      }
}

namespace {

// kPixels adjacent output pixels from (oy, ox) of kVectors x 16 outputs from o0: per tap, the
// weights' vectors load once and each pixel's input is broadcast into them, all the sums in
// registers; the bias starts them and the activation ends them.
template <int kVectors, int kPixels>
__attribute__((target("avx512f"))) void conv_pixels(const float* padded, int64_t row_stride,
                                                    const float* w, const float* bias,
                                                    int64_t outputs, int64_t o0,
                                                    const Window2D& g, int64_t oy, int64_t ox,
                                                    Activation activation, float* y) {
  __mmask16 m[kVectors];
  __m512 acc[kPixels][kVectors];
#pragma GCC unroll 4
  for (int v = 0; v < kVectors; ++v) {
    m[v] = lanes16(o0 + 16 * v, outputs);
    const __m512 b = load16(bias + o0 + 16 * v, m[v]);
#pragma GCC unroll 4
    for (int p = 0; p < kPixels; ++p) acc[p][v] = b;
  }
  const int64_t step = g.w.stride;
  for (int64_t fr = 0; fr < g.h.k; ++fr) {
    const float* row = padded + (oy * g.h.stride + fr * g.h.dilation) * row_stride + ox * step;
    const float* wr = w + fr * g.w.k * outputs + o0;
    for (int64_t fc = 0; fc < g.w.k; ++fc, wr += outputs) {
      __m512 wv[kVectors];
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) wv[v] = load16(wr + 16 * v, m[v]);
      const float* tap = row + fc * g.w.dilation;
#pragma GCC unroll 4
      for (int p = 0; p < kPixels; ++p) {
        const __m512 xv = _mm512_set1_ps(tap[p * step]);
#pragma GCC unroll 4
        for (int v = 0; v < kVectors; ++v) acc[p][v] = _mm512_fmadd_ps(xv, wv[v], acc[p][v]);
      }
    }
  }
  // max(0, a) and min(6, a) return a where it is NaN, as activated() keeps NaN.
  const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
#pragma GCC unroll 4
  for (int p = 0; p < kPixels; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      __m512 a = acc[p][v];
      if (activation != Activation::None) a = _mm512_max_ps(zero, a);
      if (activation == Activation::Relu6) a = _mm512_min_ps(six, a);
      store16(y + (oy * g.w.out + ox + p) * outputs + o0 + 16 * v, m[v], a);
    }
}

template <int kVectors>
__attribute__((target("avx512f"))) void conv_outputs(const float* padded, int64_t row_stride,
                                                     const float* w, const float* bias,
                                                     int64_t outputs, int64_t o0,
                                                     const Window2D& g, Activation activation,
                                                     float* y) {
  constexpr int kPixels = 4;
  for (int64_t oy = 0; oy < g.h.out; ++oy) {
    int64_t ox = 0;
    for (; ox + kPixels <= g.w.out; ox += kPixels)
      conv_pixels<kVectors, kPixels>(padded, row_stride, w, bias, outputs, o0, g, oy, ox,
                                     activation, y);
    for (; ox < g.w.out; ++ox)
      conv_pixels<kVectors, 1>(padded, row_stride, w, bias, outputs, o0, g, oy, ox, activation,
                               y);
  }
}

}  // namespace

__attribute__((target("avx512f"))) void single_channel_conv_avx512(
    const float* padded, int64_t row_stride, const float* w, const float* bias, int64_t outputs,
    const Window2D& g, Activation activation, float* y) {
  for (int64_t o0 = 0; o0 < outputs; o0 += 64) {
    switch (std::min<int64_t>(4, (outputs - o0 + 15) / 16)) {
      case 4: conv_outputs<4>(padded, row_stride, w, bias, outputs, o0, g, activation, y); break;
      case 3: conv_outputs<3>(padded, row_stride, w, bias, outputs, o0, g, activation, y); break;
      case 2: conv_outputs<2>(padded, row_stride, w, bias, outputs, o0, g, activation, y); break;
      default: conv_outputs<1>(padded, row_stride, w, bias, outputs, o0, g, activation, y);
    }
  }
}

namespace {

__attribute__((target("avx512f"))) inline __m512i mix32(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(0x846ca68bU)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

}  // namespace

namespace {

// p[0, 16): whole vectors load without a mask, since masked loads streamed a 6.4M-float sum 1.5x
// slower on an AMD EPYC (avx512f, no AMX); the tail loads the lanes in `m`, the others zero.
template <bool kWhole>
__attribute__((target("avx512f"))) inline __m512 load_lanes(__mmask16 m, const float* p) {
  if constexpr (kWhole) return _mm512_loadu_ps(p);
  return load16(p, m);
}

// add_n_span_avx512's 16 results from element i (lanes m).
template <bool kWhole>
__attribute__((target("avx512f"))) inline __m512 activated_sums(const float* const* xs,
                                                                int64_t count, int64_t i,
                                                                __mmask16 m,
                                                                Activation activation) {
  __m512 sums;
  if (count <= 2) {
    // One float addition rounds the exact sum once, as the double sum does.
    sums = load_lanes<kWhole>(m, xs[0] + i);
    if (count == 2) sums = _mm512_add_ps(sums, load_lanes<kWhole>(m, xs[1] + i));
  } else {
    __m512d low = _mm512_setzero_pd(), high = _mm512_setzero_pd();
    for (int64_t k = 0; k < count; ++k) {
      const __m512 x = load_lanes<kWhole>(m, xs[k] + i);
      low = _mm512_add_pd(low, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
      high = _mm512_add_pd(high, _mm512_cvtps_pd(_mm256_castpd_ps(
                                     _mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
    }
    sums = _mm512_castpd_ps(_mm512_insertf64x4(
        _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(low))),
        _mm256_castps_pd(_mm512_cvtpd_ps(high)), 1));
  }
  // max(0, v) and min(6, v) return v when it is NaN, as `activated` does.
  if (activation != Activation::None) sums = _mm512_max_ps(_mm512_setzero_ps(), sums);
  if (activation == Activation::Relu6) sums = _mm512_min_ps(_mm512_set1_ps(6.0f), sums);
  return sums;
}

}  // namespace

__attribute__((target("avx512f"))) void add_n_span_avx512(const float* const* xs, int64_t count,
                                                         int64_t begin, int64_t end,
                                                         Activation activation, float* y) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16)
    _mm512_storeu_ps(y + i, activated_sums<true>(xs, count, i, 0xFFFF, activation));
  if (i < end) {
    const __mmask16 m = lanes16(i, end);
    store16(y + i, m, activated_sums<false>(xs, count, i, m, activation));
  }
}

namespace {

// activation_op_value (core/activation.h) on 16 floats: max(v, 0) is 0 where v is NaN, as the
// Relu op gives; max(0, v) and min(6, v) keep NaN, as Relu6 does.
__attribute__((target("avx512f"))) inline __m512 activation_op_values(__m512 v,
                                                                      Activation activation) {
  if (activation == Activation::Relu) return _mm512_max_ps(v, _mm512_setzero_ps());
  if (activation == Activation::Relu6)
    return _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), v));
  return v;
}

// normalize_rows_avx512's 16 results from channel c (lanes m) of the row at x, y. A product
// and a sum, not contracted into a fused multiply-add: the portable loop's bits (its x86-64
// baseline build has no FMA), so that a run's results do not depend on the CPU's vectors.
template <bool kWhole>
__attribute__((target("avx512f"), optimize("fp-contract=off"))) inline void normalize16(
    const float* x, const float* mean, const float* scale, const float* beta, int64_t c,
    __mmask16 m, Activation activation, float* y) {
  const __m512 centered =
      _mm512_sub_ps(load_lanes<kWhole>(m, x + c), load_lanes<kWhole>(m, mean + c));
  const __m512 v = _mm512_add_ps(_mm512_mul_ps(centered, load_lanes<kWhole>(m, scale + c)),
                                 load_lanes<kWhole>(m, beta + c));
  if constexpr (kWhole)
    _mm512_storeu_ps(y + c, activation_op_values(v, activation));
  else
    store16(y + c, m, activation_op_values(v, activation));
}

template <bool kWhole>
__attribute__((target("avx512f"))) inline void store_lanes(float* p, __mmask16 m, __m512 v) {
  if constexpr (kWhole)
    _mm512_storeu_ps(p, v);
  else
    store16(p, m, v);
}

// What strip_sums adds up of each element: x itself, (x - mean)^2, or dy and dy * (x - mean)
// (a BatchNorm's gradient, dy through an activation's gradient or not).
enum class StripSum { kValues, kSquares, kGrad };

// dy through the gate on 16 floats: dy where `activated` lets the activation's gradient through
// (above 0, and for Relu6 below 6; NaN fails both comparisons), else 0, as
// activation_grad_op_value gives; dy itself without a gate.
__attribute__((target("avx512f"))) inline __m512 gated16(__m512 dy, const ActivationGrad& gate,
                                                         __m512 activated) {
  if (gate.activated == nullptr) return dy;
  __mmask16 pass = _mm512_cmp_ps_mask(activated, _mm512_setzero_ps(), _CMP_GT_OQ);
  if (gate.activation == Activation::Relu6)
    pass = _mm512_mask_cmp_ps_mask(pass, activated, _mm512_set1_ps(6.0f), _CMP_LT_OQ);
  return _mm512_maskz_mov_ps(pass, dy);
}

// The statistics' sums of kVectors vectors of channels from c0 over rows [r0, r0 + count), in
// registers, of what kSum names (`dy`, `gate` and `mean` are read as it needs them), each added
// in row order; stored to block (and block + channels for the second sums of kGrad). Without
// kWhole, one vector under `m`.
template <int kVectors, bool kWhole, StripSum kSum>
__attribute__((target("avx512f"), optimize("fp-contract=off"))) inline void strip_sums(
    const float* x, const float* dy, const ActivationGrad& gate, const float* mean, int64_t r0,
    int64_t count, int64_t channels, int64_t c0, __mmask16 m, float* block) {
  __m512 sums[kVectors], products[kVectors], centers[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    sums[v] = products[v] = _mm512_setzero_ps();
    centers[v] = kSum != StripSum::kValues ? load_lanes<kWhole>(m, mean + c0 + 16 * v) : sums[v];
  }
  for (int64_t r = r0; r < r0 + count; ++r) {
    const int64_t at = r * channels + c0;
    for (int v = 0; v < kVectors; ++v) {
      const __m512 xv = load_lanes<kWhole>(m, x + at + 16 * v);
      if constexpr (kSum == StripSum::kGrad) {
        const __m512 activated =
            gate.activated == nullptr ? xv : load_lanes<kWhole>(m, gate.activated + at + 16 * v);
        const __m512 g = gated16(load_lanes<kWhole>(m, dy + at + 16 * v), gate, activated);
        sums[v] = _mm512_add_ps(sums[v], g);
        products[v] = _mm512_add_ps(products[v], _mm512_mul_ps(g, _mm512_sub_ps(xv, centers[v])));
      } else if constexpr (kSum == StripSum::kSquares) {
        const __m512 d = _mm512_sub_ps(xv, centers[v]);
        sums[v] = _mm512_add_ps(sums[v], _mm512_mul_ps(d, d));
      } else {
        sums[v] = _mm512_add_ps(sums[v], xv);
      }
    }
  }
  for (int v = 0; v < kVectors; ++v) {
    store_lanes<kWhole>(block + c0 + 16 * v, m, sums[v]);
    if constexpr (kSum == StripSum::kGrad)
      store_lanes<kWhole>(block + channels + c0 + 16 * v, m, products[v]);
  }
}

// strip_sums over all channels: strips of four whole vectors, then the whole vectors left, then
// the last channels under a mask.
template <StripSum kSum>
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void column_strip_sums(
    const float* x, const float* dy, const ActivationGrad& gate, const float* mean, int64_t r0,
    int64_t count, int64_t channels, float* block) {
  const int64_t whole = channels / 16 * 16;
  int64_t c0 = 0;
  for (; c0 + 64 <= whole; c0 += 64)
    strip_sums<4, true, kSum>(x, dy, gate, mean, r0, count, channels, c0, 0xFFFF, block);
  switch ((whole - c0) / 16) {
    case 3:
      strip_sums<3, true, kSum>(x, dy, gate, mean, r0, count, channels, c0, 0xFFFF, block);
      break;
    case 2:
      strip_sums<2, true, kSum>(x, dy, gate, mean, r0, count, channels, c0, 0xFFFF, block);
      break;
    case 1:
      strip_sums<1, true, kSum>(x, dy, gate, mean, r0, count, channels, c0, 0xFFFF, block);
      break;
    default:
      break;
  }
  if (whole < channels)
    strip_sums<1, false, kSum>(x, dy, gate, mean, r0, count, channels, whole,
                               lanes16(whole, channels), block);
}

// dx = dy * a + (x - mean) * b + k on one row's channels [c, c + 16), dy through the gate
// (`activated_row` is its row of the gate's activated values).
template <bool kWhole>
__attribute__((target("avx512f"), optimize("fp-contract=off"))) inline void grad_dx16(
    const float* dy_row, const ActivationGrad& gate, const float* activated_row, const float* x_row,
    const float* mean, const float* a, const float* b, const float* k, int64_t c, __mmask16 m,
    float* dx_row) {
  const __m512 xv = load_lanes<kWhole>(m, x_row + c);
  const __m512 dy =
      gated16(load_lanes<kWhole>(m, dy_row + c), gate,
              activated_row == nullptr ? xv : load_lanes<kWhole>(m, activated_row + c));
  const __m512 deviation = _mm512_sub_ps(xv, load_lanes<kWhole>(m, mean + c));
  const __m512 dx =
      _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(dy, load_lanes<kWhole>(m, a + c)),
                                  _mm512_mul_ps(deviation, load_lanes<kWhole>(m, b + c))),
                    load_lanes<kWhole>(m, k + c));
  store_lanes<kWhole>(dx_row + c, m, dx);
}

}  // namespace

void column_sums_avx512(const float* dy, int64_t rows, int64_t channels, float* sums) {
  column_strip_sums<StripSum::kValues>(dy, nullptr, {}, nullptr, 0, rows, channels, sums);
}

void batch_norm_square_sums_avx512(const float* x, const float* mean, int64_t r0, int64_t count,
                                   int64_t channels, float* block) {
  column_strip_sums<StripSum::kSquares>(x, nullptr, {}, mean, r0, count, channels, block);
}

void batch_norm_grad_sums_avx512(const float* dy, ActivationGrad gate, const float* x,
                                 const float* mean, int64_t r0, int64_t count, int64_t channels,
                                 float* block) {
  column_strip_sums<StripSum::kGrad>(x, dy, gate, mean, r0, count, channels, block);
}

__attribute__((target("avx512f"), optimize("fp-contract=off"))) void batch_norm_grad_rows_avx512(
    const float* dy, ActivationGrad gate, const float* x, const float* mean, const float* a,
    const float* b, const float* k, int64_t channels, int64_t begin, int64_t end, float* dx) {
  const int64_t whole = channels / 16 * 16;
  const __mmask16 tail = lanes16(whole, channels);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t row = r * channels;
    const float* activated_row = gate.activated == nullptr ? nullptr : gate.activated + row;
    for (int64_t c = 0; c < whole; c += 16)
      grad_dx16<true>(dy + row, gate, activated_row, x + row, mean, a, b, k, c, 0xFFFF, dx + row);
    if (whole < channels)
      grad_dx16<false>(dy + row, gate, activated_row, x + row, mean, a, b, k, whole, tail,
                       dx + row);
  }
}

__attribute__((target("avx512f"), optimize("fp-contract=off"))) void normalize_rows_avx512(
    const float* x, const float* mean, const float* scale, const float* beta, int64_t channels,
    int64_t begin, int64_t end, Activation activation, float* y) {
  const int64_t whole = channels / 16 * 16;
  const __mmask16 tail = lanes16(whole, channels);
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * channels;
    float* yr = y + r * channels;
    for (int64_t c = 0; c < whole; c += 16)
      normalize16<true>(xr, mean, scale, beta, c, 0xFFFF, activation, yr);
    if (whole < channels) normalize16<false>(xr, mean, scale, beta, whole, tail, activation, yr);
  }
}

__attribute__((target("avx512f"))) void dropout_span_avx512(const float* x, int64_t begin,
                                                            int64_t end, uint64_t key,
                                                            uint32_t threshold, float keep,
                                                            float* y, float* mask) {
  const __m512i key_low = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(key)));
  const __m512i key_high = _mm512_set1_epi32(
      static_cast<int>(static_cast<uint32_t>(key >> 32) ^
                       static_cast<uint32_t>(static_cast<uint64_t>(begin) >> 32)));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(threshold));
  const __m512 kept = _mm512_set1_ps(keep);
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 m = lanes16(i - begin, end - begin);
    const __m512i index =
        _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(i))), lane);
    const __m512i first = mix32(_mm512_xor_si512(index, key_low));
    const __m512i bits = _mm512_srli_epi32(mix32(_mm512_xor_si512(first, key_high)), 8);
    // Bits and threshold are below 2^25, so a signed comparison orders them as unsigned ones.
    const __m512 mask_values = _mm512_maskz_mov_ps(_mm512_cmpge_epi32_mask(bits, limit), kept);
    store16(mask + i, m, mask_values);
    store16(y + i, m, _mm512_mul_ps(load16(x + i, m), mask_values));
  }
}

}  // namespace sf::float_loops
