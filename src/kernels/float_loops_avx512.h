// The AVX-512 builds of the inner loops of kernels/float_loops.cc (float_loops_avx512.cc,
// compiled on x86-64 only), which it calls where cpu_features() has AVX-512 F; each has the
// contract of the portable loop of the same name there. Channels run sixteen to a vector, the
// last vector masked, so any channel count works.
#pragma once

#include <cstdint>

#include "core/activation.h"
#include "ops/conv_geometry.h"

namespace sf::float_loops {

#if defined(__x86_64__)
// One output row of MaxPool: y_row [g.w.out, channels] from the NHWC image [g.h.in, g.w.in,
// channels], over the input rows [r_begin, r_end) of the row's windows: each value the maximum
// of its window's taps (NaN skipped), -inf for a window with none.
void max_pool_row_avx512(const float* image, int64_t channels, const Window2D& g, int64_t r_begin,
                         int64_t r_end, float* y_row);

// One output row of MaxPoolGrad where the windows tile the image (each input position in exactly
// one window): for the row's windows over input rows [r_begin, r_end) of the NHWC images x and dx
// [g.h.in, g.w.in, channels], the first tap in row-major window order whose x equals y gets dy
// (with relu, only where y > 0) and every other tap 0. y_row and dy_row are [g.w.out, channels].
void max_pool_grad_row_avx512(const float* x_image, const float* y_row, const float* dy_row,
                              int64_t channels, const Window2D& g, int64_t r_begin, int64_t r_end,
                              bool relu, float* dx_image);

// One output row of MaxPoolWindowArgmax: y_row and argmax_row [g.w.out, channels] from the NHWC
// image [g.h.in, g.w.in, channels], the row's windows starting at input row r0 (negative in
// padding).
void max_pool_window_argmax_row_avx512(const float* image, int64_t channels, const Window2D& g,
                                       int64_t r0, bool relu, float* y_row, uint8_t* argmax_row);

// One output row of MaxPoolGradWindowArgmax where the windows tile the image: dy_row and
// argmax_row [g.w.out, channels] into the row's windows of the NHWC image dx [g.h.in, g.w.in,
// channels], starting at input row r0.
void max_pool_grad_window_argmax_row_avx512(const float* dy_row, const uint8_t* argmax_row,
                                            int64_t channels, const Window2D& g, int64_t r0,
                                            float* dx_image);

// For each channel c, the first tap t whose x_taps[t][c] equals y[c] gets dy[c] (with relu,
// only where y[c] > 0) and the others 0: stored into dx_taps[t][c], or added to it with
// accumulate.
void route_to_first_max_avx512(const float* const* x_taps, float* const* dx_taps, int64_t count,
                               int64_t channels, const float* y, const float* dy, bool relu,
                               bool accumulate);

// sums[t, o] += the sum over output pixels of padded[tap t of the pixel] * dy[pixel, o], for
// an image zero-padded so that every tap is inside it, rows `row_stride` floats apart; the
// sums' rows are `outputs` rounded up to whole vectors of 16.
void single_channel_filter_sums_avx512(const float* padded, int64_t row_stride, const float* dy,
                                       int64_t outputs, const Window2D& g, float* sums);

// One image of conv_single_channel_f32 (float_loops.h), its input padded as above.
void single_channel_conv_avx512(const float* padded, int64_t row_stride, const float* w,
                                const float* bias, int64_t outputs, const Window2D& g,
                                Activation activation, float* y);

// sums[c] = the float sum of dy[r, c] over rows r, added in row order.
void column_sums_avx512(const float* dy, int64_t rows, int64_t channels, float* sums);

// add_n_f32 over elements [begin, end): each sum in double, inputs in order, rounded once, then
// the activation.
void add_n_span_avx512(const float* const* xs, int64_t count, int64_t begin, int64_t end,
                       Activation activation, float* y);

// batch_norm_f32's variance: block [channels] = the float sums over rows [r0, r0 + count) of
// (x - mean)^2 for x [rows, channels], each added in row order.
void batch_norm_square_sums_avx512(const float* x, const float* mean, int64_t r0, int64_t count,
                                   int64_t channels, float* block);

// batch_norm_grad_f32's sums: block [2 * channels] = the float sums over rows [r0, r0 + count)
// of dy and, after them, of dy * (x - mean), each added in row order (dy through `gate`).
void batch_norm_grad_sums_avx512(const float* dy, ActivationGrad gate, const float* x,
                                 const float* mean, int64_t r0, int64_t count, int64_t channels,
                                 float* block);

// batch_norm_grad_f32's dx over rows [begin, end): dy * a + (x - mean) * b + k per channel (dy
// through `gate`).
void batch_norm_grad_rows_avx512(const float* dy, ActivationGrad gate, const float* x,
                                 const float* mean, const float* a, const float* b, const float* k,
                                 int64_t channels, int64_t begin, int64_t end, float* dx);

// batch_norm_f32's normalizing pass over rows [begin, end) of x and y [rows, channels]:
// y = (x - mean) * scale + beta, then the activation as the Relu or Relu6 op gives it.
void normalize_rows_avx512(const float* x, const float* mean, const float* scale, const float* beta,
                           int64_t channels, int64_t begin, int64_t end, Activation activation,
                           float* y);

// dropout_f32 over elements [begin, end), which lie within one block of 2^32 indices.
void dropout_span_avx512(const float* x, int64_t begin, int64_t end, uint64_t key,
                         uint32_t threshold, float keep, float* y, float* mask);
#endif

}  // namespace sf::float_loops
