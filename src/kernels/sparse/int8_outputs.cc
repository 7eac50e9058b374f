#include "kernels/sparse/int8_outputs.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "kernels/int8_loops.h"
#include "kernels/quantized_args.h"
#include "kernels/sparse/int8_sparse_product.h"
#include "kernels/sparse/sparse_weights.h"
#include "kernels/sparse/transpose_avx512.h"

namespace sf::sparse {

namespace {

// GCC 12's intrinsics start from _mm512_undefined_epi32(), a deliberate self-initialization
// that -Wmaybe-uninitialized reports once they are inlined (as in kernels/int8_loops.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// The offsets of 16 channels added to their sums in int64 and narrowed to int32 with saturation,
// as the scalar accumulator() does.
__attribute__((target("avx512f"), always_inline)) inline __m512i offset_sums(__m512i sums,
                                                                             __m512i offsets_lo,
                                                                             __m512i offsets_hi) {
  const __m256i lo = _mm512_cvtsepi64_epi32(
      _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(sums)), offsets_lo));
  const __m256i hi = _mm512_cvtsepi64_epi32(
      _mm512_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(sums, 1)), offsets_hi));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Int8Outputs::accumulators for 16 channels: each pixel's 16 sums loaded (channel stride 1), or
// blocks of 16 pixels of each channel loaded and transposed.
__attribute__((target("avx512f"))) void accumulators_16_avx512(
    const int32_t* sums, int64_t pixel_stride, int64_t channel_stride, int64_t pixels,
    const int64_t* offsets, int32_t* out, int64_t out_stride) {
  const __m512i offsets_lo = _mm512_loadu_si512(offsets);
  const __m512i offsets_hi = _mm512_loadu_si512(offsets + 8);
  if (channel_stride == 1) {
    for (int64_t p = 0; p < pixels; ++p)
      _mm512_storeu_si512(
          out + p * out_stride,
          offset_sums(_mm512_loadu_si512(sums + p * pixel_stride), offsets_lo, offsets_hi));
    return;
  }
  if (pixel_stride != 1) {  // neither layout: one gather per pixel
    const __m512i lanes =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(static_cast<int32_t>(channel_stride)));
    for (int64_t p = 0; p < pixels; ++p)
      _mm512_storeu_si512(out + p * out_stride,
                          offset_sums(_mm512_i32gather_epi32(lanes, sums + p * pixel_stride, 4),
                                      offsets_lo, offsets_hi));
    return;
  }
  for (int64_t p0 = 0; p0 < pixels; p0 += 16) {
    const int64_t n = std::min<int64_t>(16, pixels - p0);
    const auto mask = static_cast<__mmask16>(n == 16 ? 0xFFFFu : (1u << n) - 1);
    __m512i block[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)
      block[c] = _mm512_maskz_loadu_epi32(mask, sums + c * channel_stride + p0);
    transpose_16x16(block);
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p)
      if (p < n)
        _mm512_storeu_si512(out + (p0 + p) * out_stride,
                            offset_sums(block[p], offsets_lo, offsets_hi));
  }
}

#pragma GCC diagnostic pop

}  // namespace

OutputWeightSums output_weight_sums(const int8_t* w, int64_t k, int64_t n) {
  OutputWeightSums out;
  out.sums.assign(static_cast<size_t>(n), 0);
  std::vector<int64_t> magnitudes(static_cast<size_t>(n), 0);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t nn = 0; nn < n; ++nn) {
      out.sums[static_cast<size_t>(nn)] += w[kk * n + nn];
      magnitudes[static_cast<size_t>(nn)] += std::abs(int{w[kk * n + nn]});
    }
  for (const int64_t m : magnitudes)
    out.fit_int32 = out.fit_int32 && m * 255 <= std::numeric_limits<int32_t>::max();
  return out;
}

Int8SparseChoice choose_int8_sparse_form(const int8_t* w, int64_t rows, int64_t n,
                                         double weight_sparsity, double csr_threshold,
                                         QuadFigures quads, const std::string& node_name,
                                         const std::string& op) {
  OutputWeightSums sums = output_weight_sums(w, rows, n);
  Int8SparseChoice choice{.weight_sums = std::move(sums.sums)};
  if (!sums.fit_int32) {
    if (csr_threshold == 0.0)
      fail("node '{}' ({}): its weights' sums can overflow the sparse kernel's int32 accumulators",
           node_name, op);
    return choice;
  }
  double block_sparsity = 0.0;
  if (has_avx512_vnni()) {
    const int64_t blocks = nonzero_blocks(w, rows, n, false, kQuadBlock);
    const int64_t strips = (n + kQuadBlock - 1) / kQuadBlock;
    const double stored = static_cast<double>(blocks * kQuadBlock) / static_cast<double>(rows * n);
    choice.use_quads = stored * quads.cost < 1.0 - weight_sparsity;
    block_sparsity = 1.0 - static_cast<double>(blocks) / static_cast<double>(rows * strips);
  }
  choice.sparse = csr_threshold == 0.0 || (choice.use_quads ? block_sparsity >= quads.crossover
                                                            : weight_sparsity >= csr_threshold);
  return choice;
}

void Int8Outputs::read(const KernelContext& ctx, const std::vector<int64_t>& weight_sums) {
  const int64_t channels = static_cast<int64_t>(weight_sums.size());
  const QuantParams xq = params_input(ctx, 1);
  const std::vector<float> scales = scales_input(ctx, 3, channels);
  const std::vector<int32_t> bias = quantized_bias(ctx.inputs[4].data<float>(), xq.scale, scales);
  x_zero_point_ = xq.zero_point;
  offsets_.resize(weight_sums.size());
  for (size_t j = 0; j < offsets_.size(); ++j)
    offsets_[j] = int64_t{bias[j]} - int64_t{xq.zero_point} * weight_sums[j];
  if (!requantized_) return;
  const QuantParams out = params_input(ctx, 5);
  multipliers_ = requantize_multipliers(xq.scale, scales, out.scale);
  out_zero_point_ = out.zero_point;
  clamp_ = activation_clamp(activation_of(ctx.node), out);
}

void Int8Outputs::accumulators(const int32_t* sums, int64_t pixel_stride, int64_t channel_stride,
                               int64_t pixels, int64_t channel0, int64_t width, int32_t* out,
                               int64_t out_stride) const {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && width == 16) {
    accumulators_16_avx512(sums, pixel_stride, channel_stride, pixels, offsets_.data() + channel0,
                           out, out_stride);
    return;
  }
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < width; ++c)
      out[p * out_stride + c] =
          accumulator(sums[p * pixel_stride + c * channel_stride], channel0 + c);
}

void Int8Outputs::requantize(const int32_t* acc, int64_t rows, uint8_t* out) const {
  requantize_rows(acc, rows, static_cast<int64_t>(multipliers_.size()), multipliers_,
                  out_zero_point_, clamp_, out);
}

}  // namespace sf::sparse
