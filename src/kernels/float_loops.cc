#include "kernels/float_loops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/parallel_for.h"
#include "kernels/dropout_draw.h"
#include "kernels/float_loops_avx512.h"

namespace sf {

using namespace float_loops;

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements; below this threads cost more than they save
// Memory-bound loops (bias): a second thread gains little, and waiting for it on a busy machine
// cost fc1's bias (64 x 1024) 2.8 ms where the one-thread reference took under 0.06.
constexpr int64_t kStreamingParallelMin = 1 << 18;

bool has_avx512() {
#if defined(__x86_64__)
  return cpu_features().avx512f;
#else
  return false;
#endif
}

// ---- max pooling ----

// The in-bounds pixels of image b's window at output (oy, ox), in row-major window order, as
// pointers to their channel vectors in `data` (x or dx); returns how many.
template <typename T>
int64_t window_taps(T* data, int64_t b, int64_t oy, int64_t ox, int64_t channels, const Window2D& g,
                    T** taps) {
  const int64_t r0 = oy * g.h.stride - g.h.pad_before, c0 = ox * g.w.stride - g.w.pad_before;
  int64_t count = 0;
  for (int64_t r = std::max<int64_t>(r0, 0); r < std::min(r0 + g.h.k, g.h.in); ++r)
    for (int64_t c = std::max<int64_t>(c0, 0); c < std::min(c0 + g.w.k, g.w.in); ++c)
      taps[count++] = data + ((b * g.h.in + r) * g.w.in + c) * channels;
  return count;
}

// The portable path; max_pool_f32 takes max_pool_row_avx512 where the CPU has AVX-512.
void max_of_taps(const float* const* taps, int64_t count, int64_t channels, float* y) {
  std::fill(y, y + channels, -std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < count; ++t)
    for (int64_t c = 0; c < channels; ++c) y[c] = std::max(y[c], taps[t][c]);
}

void route_to_first_max(const float* const* x_taps, float* const* dx_taps, int64_t count,
                        int64_t channels, const float* y, const float* dy, bool relu,
                        bool accumulate) {
#if defined(__x86_64__)
  if (has_avx512())
    return route_to_first_max_avx512(x_taps, dx_taps, count, channels, y, dy, relu, accumulate);
#endif
  for (int64_t c = 0; c < channels; ++c) {
    bool found = false;
    const float routed = relu && !(y[c] > 0.0f) ? 0.0f : dy[c];
    for (int64_t t = 0; t < count; ++t) {
      const bool hit = !found && x_taps[t][c] == y[c];
      const float share = hit ? routed : 0.0f;
      dx_taps[t][c] = accumulate ? dx_taps[t][c] + share : share;
      found = found || hit;
    }
  }
}

}  // namespace

void max_pool_f32(const float* x, int64_t n, int64_t channels, const Window2D& g, float* y) {
  const int64_t rows = n * g.h.out;
#if defined(__x86_64__)
  // Row by row without a tap list: building one per pixel cost more than its loads (a 3x3/2 pool
  // of 111x111x64 took 178 us on one core with it).
  if (has_avx512()) {
    parallel_for(0, rows, rows * g.w.out * channels >= kParallelMin, [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t b = row / g.h.out, r0 = row % g.h.out * g.h.stride - g.h.pad_before;
        max_pool_row_avx512(x + b * g.h.in * g.w.in * channels, channels, g,
                            std::max<int64_t>(r0, 0), std::min(r0 + g.h.k, g.h.in),
                            y + row * g.w.out * channels);
      }
    });
    return;
  }
#endif
  parallel_region(rows * g.w.out * channels >= kParallelMin, [&] {
    std::vector<const float*> taps(static_cast<size_t>(g.h.k * g.w.k));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t ox = 0; ox < g.w.out; ++ox) {
        const int64_t count =
            window_taps(x, row / g.h.out, row % g.h.out, ox, channels, g, taps.data());
        max_of_taps(taps.data(), count, channels, y + (row * g.w.out + ox) * channels);
      }
  });
}

namespace {

// Output row oy of MaxPoolWindowArgmax over one NHWC image.
void window_argmax_row(const float* image, int64_t channels, const Window2D& g, int64_t oy,
                       bool relu, float* y_row, uint8_t* argmax_row) {
  const int64_t r0 = oy * g.h.stride - g.h.pad_before;
#if defined(__x86_64__)
  if (has_avx512())
    return max_pool_window_argmax_row_avx512(image, channels, g, r0, relu, y_row, argmax_row);
#endif
  for (int64_t ox = 0; ox < g.w.out; ++ox) {
    const int64_t c0 = ox * g.w.stride - g.w.pad_before;
    float* y = y_row + ox * channels;
    uint8_t* argmax = argmax_row + ox * channels;
    for (int64_t c = 0; c < channels; ++c) {
      float best = -std::numeric_limits<float>::infinity();
      int64_t at = kNoWindowArgmax;
      for (int64_t r = std::max<int64_t>(r0, 0); r < std::min(r0 + g.h.k, g.h.in); ++r)
        for (int64_t col = std::max<int64_t>(c0, 0); col < std::min(c0 + g.w.k, g.w.in); ++col) {
          const float v = image[(r * g.w.in + col) * channels + c];
          if (v > best || (at == kNoWindowArgmax && v >= best)) {
            best = v;
            at = (r - r0) * g.w.k + col - c0;
          }
        }
      y[c] = best;
      argmax[c] = static_cast<uint8_t>(relu && !(best > 0.0f) ? kNoWindowArgmax : at);
    }
  }
}

}  // namespace

void max_pool_window_argmax_f32(const float* x, int64_t n, int64_t channels, const Window2D& g,
                                bool relu, float* y, uint8_t* argmax) {
  const int64_t rows = n * g.h.out, row_elements = g.w.out * channels;
  const int64_t image = g.h.in * g.w.in * channels;
  parallel_for(0, rows, rows * row_elements >= kParallelMin, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      window_argmax_row(x + row / g.h.out * image, channels, g, row % g.h.out, relu,
                        y + row * row_elements, argmax + row * row_elements);
  });
}

namespace {

// Output row oy of MaxPoolGradWindowArgmax (windows that tile) into one NHWC image of dx.
void window_scatter_row(const float* dy_row, const uint8_t* argmax_row, int64_t channels,
                        const Window2D& g, int64_t oy, float* dx_image) {
  const int64_t r0 = oy * g.h.stride - g.h.pad_before;
#if defined(__x86_64__)
  if (has_avx512())
    return max_pool_grad_window_argmax_row_avx512(dy_row, argmax_row, channels, g, r0, dx_image);
#endif
  for (int64_t ox = 0; ox < g.w.out; ++ox) {
    const int64_t c0 = ox * g.w.stride - g.w.pad_before;
    for (int64_t r = std::max<int64_t>(r0, 0); r < std::min(r0 + g.h.k, g.h.in); ++r)
      for (int64_t col = std::max<int64_t>(c0, 0); col < std::min(c0 + g.w.k, g.w.in); ++col) {
        float* tap = dx_image + (r * g.w.in + col) * channels;
        const int64_t position = (r - r0) * g.w.k + col - c0;
        for (int64_t c = 0; c < channels; ++c)
          tap[c] = argmax_row[ox * channels + c] == position ? dy_row[ox * channels + c] : 0.0f;
      }
  }
}

}  // namespace

void max_pool_grad_window_argmax_f32(const float* dy, const uint8_t* argmax, int64_t n,
                                     int64_t channels, const Window2D& g, float* dx) {
  const int64_t rows = n * g.h.out, row_elements = g.w.out * channels;
  const int64_t image = g.h.in * g.w.in * channels;
  // Every position of dx is in exactly one window, and output rows write disjoint rows of dx.
  parallel_for(0, rows, n * image >= kParallelMin, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      window_scatter_row(dy + row * row_elements, argmax + row * row_elements, channels, g,
                         row % g.h.out, dx + row / g.h.out * image);
  });
}

void max_pool_grad_f32(const float* x, const float* y, const float* dy, int64_t n, int64_t channels,
                       const Window2D& g, bool relu, float* dx) {
  const int64_t work = n * g.h.in * g.w.in * channels;
  if (windows_tile(g.h) && windows_tile(g.w)) {
    // Every position of x is in exactly one window, so each is written once, and output rows
    // touch disjoint rows of dx.
    const int64_t rows = n * g.h.out;
#if defined(__x86_64__)
    // Row by row without tap lists, as max_pool_f32: building two per pixel took longer than
    // routing its gradient.
    if (has_avx512()) {
      const int64_t image = g.h.in * g.w.in * channels;
      parallel_for(0, rows, work >= kParallelMin, [&](int64_t lo, int64_t hi) {
        for (int64_t row = lo; row < hi; ++row) {
          const int64_t b = row / g.h.out, r0 = row % g.h.out * g.h.stride - g.h.pad_before;
          const int64_t at = row * g.w.out * channels;
          max_pool_grad_row_avx512(x + b * image, y + at, dy + at, channels, g,
                                   std::max<int64_t>(r0, 0), std::min(r0 + g.h.k, g.h.in), relu,
                                   dx + b * image);
        }
      });
      return;
    }
#endif
    parallel_region(work >= kParallelMin, [&] {
      std::vector<const float*> x_taps(static_cast<size_t>(g.h.k * g.w.k));
      std::vector<float*> dx_taps(x_taps.size());
#pragma omp for schedule(static)
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t b = row / g.h.out, oy = row % g.h.out;
        for (int64_t ox = 0; ox < g.w.out; ++ox) {
          const int64_t count = window_taps(x, b, oy, ox, channels, g, x_taps.data());
          window_taps(dx, b, oy, ox, channels, g, dx_taps.data());
          const int64_t at = (row * g.w.out + ox) * channels;
          route_to_first_max(x_taps.data(), dx_taps.data(), count, channels, y + at, dy + at, relu,
                             false);
        }
      }
    });
    return;
  }
  // Overlapping windows (or positions no window reads): sums per image, images in parallel.
  const int64_t image = g.h.in * g.w.in * channels;
  parallel_region(work >= kParallelMin, [&] {
    std::vector<const float*> x_taps(static_cast<size_t>(g.h.k * g.w.k));
    std::vector<float*> dx_taps(x_taps.size());
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; ++b) {
      std::memset(dx + b * image, 0, static_cast<size_t>(image) * sizeof(float));
      for (int64_t oy = 0; oy < g.h.out; ++oy)
        for (int64_t ox = 0; ox < g.w.out; ++ox) {
          const int64_t count = window_taps(x, b, oy, ox, channels, g, x_taps.data());
          window_taps(dx, b, oy, ox, channels, g, dx_taps.data());
          const int64_t at = ((b * g.h.out + oy) * g.w.out + ox) * channels;
          route_to_first_max(x_taps.data(), dx_taps.data(), count, channels, y + at, dy + at, relu,
                             true);
        }
    }
  });
}

// ---- column sums (bias gradients) ----

namespace {

constexpr int64_t kSumBlockRows = 256;

// sums[c] = the float sum of x [rows, channels] over rows.
void block_column_sums(const float* x, int64_t rows, int64_t channels, float* sums) {
#if defined(__x86_64__)
  if (has_avx512()) return column_sums_avx512(x, rows, channels, sums);
#endif
  std::fill(sums, sums + channels, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < channels; ++c) sums[c] += x[r * channels + c];
}

// sums[c] += the sum of x [rows, channels] over rows: blocks of kSumBlockRows summed in float,
// added in double, which is about the reference's double sum at float speed.
void add_column_sums(const float* x, int64_t rows, int64_t channels, std::vector<float>& block,
                     double* sums) {
  for (int64_t r0 = 0; r0 < rows; r0 += kSumBlockRows) {
    block_column_sums(x + r0 * channels, std::min(kSumBlockRows, rows - r0), channels,
                      block.data());
    for (int64_t c = 0; c < channels; ++c) sums[c] += block[static_cast<size_t>(c)];
  }
}

// db[c] = the sum of image_sums [n, channels] over images, in image order, rounded once: the
// same bits however the images were shared among threads.
void sum_over_images(const std::vector<double>& image_sums, int64_t n, int64_t channels,
                     float* db) {
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (int64_t b = 0; b < n; ++b) sum += image_sums[static_cast<size_t>(b * channels + c)];
    db[c] = static_cast<float>(sum);
  }
}

// The sums of the threads' totals [threads, size] over threads, in thread order: the same bits
// for a given thread count.
std::vector<double> thread_totals(const std::vector<double>& totals, int threads, int64_t size) {
  std::vector<double> sums(static_cast<size_t>(size), 0.0);
  for (int t = 0; t < threads; ++t)
    for (int64_t i = 0; i < size; ++i)
      sums[static_cast<size_t>(i)] += totals[static_cast<size_t>(t * size + i)];
  return sums;
}

// thread_totals rounded once to float.
void sum_over_threads(const std::vector<double>& totals, int threads, int64_t size, float* sums) {
  const std::vector<double> exact = thread_totals(totals, threads, size);
  for (int64_t i = 0; i < size; ++i) sums[i] = static_cast<float>(exact[static_cast<size_t>(i)]);
}

}  // namespace

// ---- single-channel convs: the forward pass and the filter gradient ----

namespace {

// Image b of x [n, g.h.in, g.w.in] into `padded` [g.h.padded_extent(), g.w.padded_extent()],
// zeros around it, so that every tap of every output pixel is inside.
void pad_image(const float* x, int64_t b, const Window2D& g, std::vector<float>& padded) {
  const int64_t cols = g.w.padded_extent();
  std::fill(padded.begin(), padded.end(), 0.0f);
  for (int64_t r = 0; r < g.h.in; ++r)
    std::copy_n(x + (b * g.h.in + r) * g.w.in, g.w.in,
                padded.data() + (r + g.h.pad_before) * cols + g.w.pad_before);
}

// One padded image's conv_single_channel_f32 into image_y [g.h.out, g.w.out, outputs].
void conv_single_channel_image(const float* padded, int64_t cols, const float* w, const float* bias,
                               int64_t outputs, const Window2D& g, Activation activation,
                               float* image_y) {
#if defined(__x86_64__)
  if (has_avx512())
    return single_channel_conv_avx512(padded, cols, w, bias, outputs, g, activation, image_y);
#endif
  for (int64_t oy = 0; oy < g.h.out; ++oy)
    for (int64_t ox = 0; ox < g.w.out; ++ox) {
      const float* corner = padded + oy * g.h.stride * cols + ox * g.w.stride;
      float* out = image_y + (oy * g.w.out + ox) * outputs;
      std::copy_n(bias, outputs, out);
      const float* wt = w;
      for (int64_t fr = 0; fr < g.h.k; ++fr)
        for (int64_t fc = 0; fc < g.w.k; ++fc, wt += outputs) {
          const float xv = corner[fr * g.h.dilation * cols + fc * g.w.dilation];
          for (int64_t o = 0; o < outputs; ++o) out[o] += xv * wt[o];
        }
      for (int64_t o = 0; o < outputs; ++o)
        out[o] = static_cast<float>(activated(out[o], activation));
    }
}

}  // namespace

void conv_single_channel_f32(const float* x, const float* w, const float* bias, int64_t n,
                             int64_t outputs, const Window2D& g, Activation activation, float* y) {
  const int64_t rows = g.h.padded_extent(), cols = g.w.padded_extent();
  const int64_t pixels = g.h.out * g.w.out;
  parallel_region(n > 1 && n * pixels * outputs * g.h.k * g.w.k >= kParallelMin, [&] {
    std::vector<float> padded(static_cast<size_t>(rows * cols));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; ++b) {
      pad_image(x, b, g, padded);
      conv_single_channel_image(padded.data(), cols, w, bias, outputs, g, activation,
                                y + b * pixels * outputs);
    }
  });
}

void conv_single_channel_max_pool_f32(const float* x, const float* w, const float* bias, int64_t n,
                                      int64_t outputs, const Window2D& conv, Activation activation,
                                      const Window2D& pool, bool relu, float* y, uint8_t* argmax) {
  const int64_t rows = conv.h.padded_extent(), cols = conv.w.padded_extent();
  const int64_t pixels = conv.h.out * conv.w.out, pooled = pool.h.out * pool.w.out * outputs;
  parallel_region(n > 1 && n * pixels * outputs * conv.h.k * conv.w.k >= kParallelMin, [&] {
    std::vector<float> padded(static_cast<size_t>(rows * cols));
    std::vector<float> activations(static_cast<size_t>(pixels * outputs));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; ++b) {
      pad_image(x, b, conv, padded);
      conv_single_channel_image(padded.data(), cols, w, bias, outputs, conv, activation,
                                activations.data());
      for (int64_t oy = 0; oy < pool.h.out; ++oy) {
        const int64_t at = b * pooled + oy * pool.w.out * outputs;
        window_argmax_row(activations.data(), outputs, pool, oy, relu, y + at, argmax + at);
      }
    }
  });
}

namespace {

// One padded image's filter sums: sums[t * filter_sums_stride(outputs) + o] += the sum over
// output pixels of the pixel's tap t times image_dy [g.h.out, g.w.out, outputs].
void filter_sums_image(const float* padded, int64_t cols, const float* image_dy, int64_t outputs,
                       const Window2D& g, float* sums) {
#if defined(__x86_64__)
  if (has_avx512())
    return single_channel_filter_sums_avx512(padded, cols, image_dy, outputs, g, sums);
#endif
  for (int64_t oy = 0; oy < g.h.out; ++oy)
    for (int64_t ox = 0; ox < g.w.out; ++ox) {
      const float* d = image_dy + (oy * g.w.out + ox) * outputs;
      const float* corner = padded + oy * g.h.stride * cols + ox * g.w.stride;
      float* s = sums;
      for (int64_t fr = 0; fr < g.h.k; ++fr)
        for (int64_t fc = 0; fc < g.w.k; ++fc, s += outputs) {
          const float xv = corner[fr * g.h.dilation * cols + fc * g.w.dilation];
          for (int64_t o = 0; o < outputs; ++o) s[o] += xv * d[o];
        }
    }
}

// The filter sums' row stride: whole vectors of 16 for the AVX-512 loop.
int64_t filter_sums_stride(int64_t outputs) {
  return has_avx512() ? (outputs + 15) / 16 * 16 : outputs;
}

// A thread's filter totals [taps, outputs] += one image's sums (rows of `stride`).
void add_filter_sums(const std::vector<float>& sums, int64_t taps, int64_t outputs, int64_t stride,
                     double* totals) {
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t o = 0; o < outputs; ++o)
      totals[t * outputs + o] += sums[static_cast<size_t>(t * stride + o)];
}

}  // namespace

void conv_filter_grad_single_channel_f32(const float* x, const float* dy, int64_t n,
                                         int64_t outputs, const Window2D& g, float* df) {
  const int64_t taps = g.h.k * g.w.k, size = taps * outputs;
  const int64_t rows = g.h.padded_extent(), cols = g.w.padded_extent();
  const int64_t sums_stride = filter_sums_stride(outputs);
  const int threads =
      n > 1 && n * g.h.out * g.w.out * size >= kParallelMin ? omp_get_max_threads() : 1;
  std::vector<double> totals(static_cast<size_t>(threads * size), 0.0);
  parallel_region(threads > 1, [&] {
    std::vector<float> padded(static_cast<size_t>(rows * cols));
    std::vector<float> sums(static_cast<size_t>(taps * sums_stride));
    double* mine = totals.data() + omp_get_thread_num() * size;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; ++b) {
      pad_image(x, b, g, padded);
      std::fill(sums.begin(), sums.end(), 0.0f);
      filter_sums_image(padded.data(), cols, dy + b * g.h.out * g.w.out * outputs, outputs, g,
                        sums.data());
      add_filter_sums(sums, taps, outputs, sums_stride, mine);
    }
  });
  sum_over_threads(totals, threads, size, df);
}

void conv_single_channel_max_pool_grads_f32(const float* x, const float* dy, const uint8_t* argmax,
                                            int64_t n, int64_t outputs, const Window2D& conv,
                                            const Window2D& pool, float* df, float* db) {
  const int64_t taps = conv.h.k * conv.w.k, size = taps * outputs;
  const int64_t rows = conv.h.padded_extent(), cols = conv.w.padded_extent();
  const int64_t pixels = conv.h.out * conv.w.out, pooled = pool.h.out * pool.w.out;
  const int64_t sums_stride = filter_sums_stride(outputs);
  const int threads = n > 1 && n * pixels * size >= kParallelMin ? omp_get_max_threads() : 1;
  std::vector<double> totals(static_cast<size_t>(threads * size), 0.0);
  std::vector<double> image_sums(static_cast<size_t>(n * outputs), 0.0);
  parallel_region(threads > 1, [&] {
    std::vector<float> padded(static_cast<size_t>(rows * cols));
    std::vector<float> sums(static_cast<size_t>(taps * sums_stride));
    std::vector<float> image_dx(static_cast<size_t>(pixels * outputs));
    std::vector<float> block(static_cast<size_t>(outputs));
    double* mine = totals.data() + omp_get_thread_num() * size;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; ++b) {
      const float* image_dy = dy + b * pooled * outputs;
      const uint8_t* image_argmax = argmax + b * pooled * outputs;
      for (int64_t oy = 0; oy < pool.h.out; ++oy) {
        const int64_t at = oy * pool.w.out * outputs;
        window_scatter_row(image_dy + at, image_argmax + at, outputs, pool, oy, image_dx.data());
      }
      pad_image(x, b, conv, padded);
      std::fill(sums.begin(), sums.end(), 0.0f);
      filter_sums_image(padded.data(), cols, image_dx.data(), outputs, conv, sums.data());
      add_filter_sums(sums, taps, outputs, sums_stride, mine);
      // The bias's gradient sums the same dx while it is in the cache, as bias_add_grad_images_f32
      // sums an image.
      add_column_sums(image_dx.data(), pixels, outputs, block, image_sums.data() + b * outputs);
    }
  });
  sum_over_threads(totals, threads, size, df);
  sum_over_images(image_sums, n, outputs, db);
}

// ---- element-wise ----

void bias_add_f32(const float* x, const float* bias, int64_t rows, int64_t channels, bool relu,
                  float* y) {
  // Memory-bound: GCC's vectors of the plain loops run as fast as AVX-512 here, threads help.
  parallel_for(0, rows, rows * channels >= kStreamingParallelMin,
               [&](int64_t share_begin, int64_t share_end) {
                 for (int64_t r = share_begin; r < share_end; ++r) {
                   const float* xr = x + r * channels;
                   float* yr = y + r * channels;
                   if (relu) {
                     for (int64_t c = 0; c < channels; ++c) {
                       const float v = xr[c] + bias[c];
                       yr[c] = v > 0.0f ? v : 0.0f;
                     }
                   } else {
                     for (int64_t c = 0; c < channels; ++c) yr[c] = xr[c] + bias[c];
                   }
                 }
               });
}

void add_n_f32(const float* const* xs, int64_t count, int64_t n, Activation activation, float* y) {
  // The reference's inner loop over the inputs kept each element's double sum in a register
  // and vectorized nothing: 10x slower than a Relu of the same size. Here sixteen sums at a
  // time (AVX-512), or a block of them the compiler vectorizes, take each input in turn.
  // On threads from kParallelMin, as the reference's: a residual sum reads conv outputs that
  // both cores wrote, each its share; on one thread ResNet-18's 56x56x64 sum and Relu took
  // 0.12 ms, on two 0.065.
  constexpr int64_t kBlock = 512;
  const bool vector = has_avx512();
  parallel_for(0, n, n >= kParallelMin, [&](int64_t share_begin, int64_t share_end) {
#if defined(__x86_64__)
    if (vector) {
      add_n_span_avx512(xs, count, share_begin, share_end, activation, y);
      return;
    }
#else
    (void)vector;
#endif
    double sums[kBlock];
    for (int64_t begin = share_begin; begin < share_end; begin += kBlock) {
      const int64_t size = std::min(kBlock, share_end - begin);
      for (int64_t i = 0; i < size; ++i) sums[i] = 0.0;
      for (int64_t k = 0; k < count; ++k) {
        const float* x = xs[k] + begin;
        for (int64_t i = 0; i < size; ++i) sums[i] += x[i];
      }
      for (int64_t i = 0; i < size; ++i)
        y[begin + i] = static_cast<float>(activated(sums[i], activation));
    }
  });
}

namespace {

// totals[c] = the sum of column c of a [rows, columns] matrix over its rows, where
// block_sums(r0, count, block) writes the float sums of its rows [r0, r0 + count) (at most
// kSumBlockRows) to block [columns]: blocks added in double per thread and then in thread
// order, so that a given thread count always gives the same bits.
template <typename BlockSums>
std::vector<double> column_totals(int64_t rows, int64_t columns, BlockSums block_sums) {
  const int threads = rows * columns >= kStreamingParallelMin ? omp_get_max_threads() : 1;
  std::vector<double> totals(static_cast<size_t>(threads * columns), 0.0);
  const int64_t blocks = (rows + kSumBlockRows - 1) / kSumBlockRows;
  parallel_region(threads > 1, [&] {
    std::vector<float> block(static_cast<size_t>(columns));
    double* mine = totals.data() + omp_get_thread_num() * columns;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = b * kSumBlockRows;
      block_sums(r0, std::min(kSumBlockRows, rows - r0), block.data());
      for (int64_t c = 0; c < columns; ++c) mine[c] += block[static_cast<size_t>(c)];
    }
  });
  return thread_totals(totals, threads, columns);
}

// column_totals' block_sums for the matrix x [rows, channels] itself.
auto matrix_block_sums(const float* x, int64_t channels) {
  return [x, channels](int64_t r0, int64_t count, float* block) {
    block_column_sums(x + r0 * channels, count, channels, block);
  };
}

}  // namespace

void bias_add_grad_f32(const float* dy, int64_t rows, int64_t channels, float* db) {
  const std::vector<double> totals = column_totals(rows, channels, matrix_block_sums(dy, channels));
  for (int64_t c = 0; c < channels; ++c) db[c] = static_cast<float>(totals[static_cast<size_t>(c)]);
}

void bias_add_grad_images_f32(const float* dy, int64_t n, int64_t image_rows, int64_t channels,
                              float* db) {
  std::vector<double> image_sums(static_cast<size_t>(n * channels), 0.0);
  parallel_region(n > 1 && n * image_rows * channels >= kStreamingParallelMin, [&] {
    std::vector<float> block(static_cast<size_t>(channels));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; ++b)
      add_column_sums(dy + b * image_rows * channels, image_rows, channels, block,
                      image_sums.data() + b * channels);
  });
  sum_over_images(image_sums, n, channels, db);
}

// ---- batch normalization ----

namespace {

// column_totals' block_sums for the sums of (x - mean)^2, each added in row order (the AVX-512
// loop's bits too).
auto square_block_sums(const float* x, const float* mean, int64_t channels) {
  return [x, mean, channels, vector = has_avx512()](int64_t r0, int64_t count, float* block) {
#if defined(__x86_64__)
    if (vector) return batch_norm_square_sums_avx512(x, mean, r0, count, channels, block);
#endif
    std::fill(block, block + channels, 0.0f);
    for (int64_t r = r0; r < r0 + count; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const float d = x[r * channels + c] - mean[c];
        block[c] += d * d;
      }
  };
}

// y = (x - mean) * scale + beta over rows [begin, end), then the activation: a template, so
// that each activation's loop vectorizes on its own.
template <Activation activation>
void normalize_rows(const float* x, const float* mean, const float* scale, const float* beta,
                    int64_t channels, int64_t begin, int64_t end, float* y) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * channels;
    float* yr = y + r * channels;
    for (int64_t c = 0; c < channels; ++c)
      yr[c] = activation_op_value((xr[c] - mean[c]) * scale[c] + beta[c], activation);
  }
}

std::vector<double> inverse_deviations(const float* var, int64_t channels, double epsilon) {
  std::vector<double> inv(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c)
    inv[static_cast<size_t>(c)] = 1.0 / std::sqrt(static_cast<double>(var[c]) + epsilon);
  return inv;
}

// dy[i] through the gate, or as it is without one.
inline float gated(const float* dy, ActivationGrad gate, int64_t i) {
  return gate.activated ? activation_grad_op_value(dy[i], gate.activated[i], gate.activation)
                        : dy[i];
}

}  // namespace

void batch_norm_f32(const float* x, const float* gamma, const float* beta, int64_t rows,
                    int64_t channels, double epsilon, bool batch_statistics, Activation activation,
                    float* mean, float* var, float* y) {
  const double count = static_cast<double>(std::max<int64_t>(rows, 1));
  if (batch_statistics) {
    const std::vector<double> sums = column_totals(rows, channels, matrix_block_sums(x, channels));
    for (int64_t c = 0; c < channels; ++c)
      mean[c] = static_cast<float>(sums[static_cast<size_t>(c)] / count);
    // Squared deviations from the mean, a second pass: no cancellation in the variance.
    const std::vector<double> squares =
        column_totals(rows, channels, square_block_sums(x, mean, channels));
    for (int64_t c = 0; c < channels; ++c)
      var[c] = static_cast<float>(squares[static_cast<size_t>(c)] / count);
  }
  const std::vector<double> inv = inverse_deviations(var, channels, epsilon);
  std::vector<float> scale(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c)
    scale[static_cast<size_t>(c)] = static_cast<float>(inv[static_cast<size_t>(c)] * gamma[c]);
  const auto normalize = activation == Activation::Relu    ? normalize_rows<Activation::Relu>
                         : activation == Activation::Relu6 ? normalize_rows<Activation::Relu6>
                                                           : normalize_rows<Activation::None>;
  [[maybe_unused]] const bool vector = has_avx512();  // read on x86-64 only
  parallel_for(0, rows, rows * channels >= kStreamingParallelMin,
               [&](int64_t share_begin, int64_t share_end) {
#if defined(__x86_64__)
                 if (vector)
                   return normalize_rows_avx512(x, mean, scale.data(), beta, channels, share_begin,
                                                share_end, activation, y);
#endif
                 normalize(x, mean, scale.data(), beta, channels, share_begin, share_end, y);
               });
}

void batch_norm_grad_f32(const float* dy, ActivationGrad gate, const float* x, const float* gamma,
                         const float* mean, const float* var, int64_t rows, int64_t channels,
                         double epsilon, bool batch_statistics, float* dx, float* dgamma,
                         float* dbeta) {
  const std::vector<double> inv = inverse_deviations(var, channels, epsilon);
  // The sums of dy and of dy * (x - mean) side by side, in one pass over dy and x; the sum of
  // dy * xhat is inv times the second.
  const bool vector = has_avx512();
  const std::vector<double> sums = column_totals(
      rows, 2 * channels,
      [dy, gate, x, mean, channels, vector](int64_t r0, int64_t count, float* block) {
#if defined(__x86_64__)
        if (vector)
          return batch_norm_grad_sums_avx512(dy, gate, x, mean, r0, count, channels, block);
#endif
        float* __restrict block_dy = block;
        float* __restrict block_dy_deviation = block + channels;
        std::fill(block, block + 2 * channels, 0.0f);
        for (int64_t r = r0; r < r0 + count; ++r)
          for (int64_t c = 0; c < channels; ++c) {
            const int64_t i = r * channels + c;
            const float g = gated(dy, gate, i);
            block_dy[c] += g;
            block_dy_deviation[c] += g * (x[i] - mean[c]);
          }
      });
  const double* sum_dy = sums.data();
  const double* sum_dy_deviation = sums.data() + channels;
  // dx = gamma inv (dy - (sum_dy + xhat sum_dy_xhat) / m) with batch statistics, which depend on
  // x too; gamma inv dy without: per channel, dy * a + (x - mean) * b + k.
  const double m = static_cast<double>(std::max<int64_t>(rows, 1));
  std::vector<float> a(static_cast<size_t>(channels)), b(a.size()), k(a.size());
  for (int64_t c = 0; c < channels; ++c) {
    const size_t i = static_cast<size_t>(c);
    const double sum_dy_xhat = sum_dy_deviation[i] * inv[i];
    dgamma[c] = static_cast<float>(sum_dy_xhat);
    dbeta[c] = static_cast<float>(sum_dy[i]);
    const double gamma_inv = static_cast<double>(gamma[c]) * inv[i];
    a[i] = static_cast<float>(gamma_inv);
    b[i] = batch_statistics ? static_cast<float>(-gamma_inv * inv[i] * sum_dy_xhat / m) : 0.0f;
    k[i] = batch_statistics ? static_cast<float>(-gamma_inv * sum_dy[i] / m) : 0.0f;
  }
  parallel_for(0, rows, rows * channels >= kStreamingParallelMin,
               [&](int64_t share_begin, int64_t share_end) {
#if defined(__x86_64__)
                 if (vector)
                   return batch_norm_grad_rows_avx512(dy, gate, x, mean, a.data(), b.data(),
                                                      k.data(), channels, share_begin, share_end,
                                                      dx);
#endif
                 for (int64_t r = share_begin; r < share_end; ++r) {
                   const int64_t row = r * channels;
                   for (int64_t c = 0; c < channels; ++c) {
                     const size_t j = static_cast<size_t>(c);
                     dx[row + c] =
                         gated(dy, gate, row + c) * a[j] + (x[row + c] - mean[c]) * b[j] + k[j];
                   }
                 }
               });
}

// ---- dropout ----

void dropout_f32(const float* x, int64_t n, uint64_t key, uint32_t threshold, float keep, float* y,
                 float* mask) {
  const bool vector = has_avx512();
  parallel_for(0, n, n >= kStreamingParallelMin, [&](int64_t share_begin, int64_t share_end) {
    // Spans within one block of 2^32 indices, so that a vector's indices share their high word.
    for (int64_t begin = share_begin; begin < share_end;) {
      const int64_t end = std::min(share_end, ((begin >> 32) + 1) << 32);
#if defined(__x86_64__)
      if (vector) {
        dropout_span_avx512(x, begin, end, key, threshold, keep, y, mask);
        begin = end;
        continue;
      }
#endif
      (void)vector;
      for (int64_t i = begin; i < end; ++i) {
        mask[i] = dropout_bits(key, static_cast<uint64_t>(i)) < threshold ? 0.0f : keep;
        y[i] = x[i] * mask[i];
      }
      begin = end;
    }
  });
}

}  // namespace sf
