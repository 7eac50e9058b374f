// The direct XNOR conv (bit_conv.h) with VPOPCNTDQ on 32-bit lanes: per tap and dword, the
// window pixel's bits are broadcast once and XORed with 16 channels' weights per vector; a
// block of pixels x up to 4 vectors of channels stays in registers, so each weight load serves
// every pixel of the block and each broadcast every vector.
#include "kernels/binary/bit_conv_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "cpu/avx512_lanes.h"
#include "cpu/parallel_for.h"

namespace sf::binary {

// GCC 12's intrinsics start from undefined vectors, a deliberate self-initialization that
// -Wmaybe-uninitialized reports once they are inlined here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

constexpr int kLanes = 16;
constexpr int kMaxVectors = 4;  // 64 channels
constexpr int kPixels = 4;      // 4 x 4 accumulators + 4 broadcasts + a weight: 25 registers

struct Block {
  const uint32_t* origin[kPixels];  // each pixel's window origin in the padded image
  const int32_t* border[kPixels];   // its border corrections
  float* out[kPixels];              // its outputs
};

struct Layer {
  const int64_t* tap_offset;  // dwords from a window's origin to each tap's pixel
  const TapWeights* weights;
  const ConvEpilogue* epilogue;
  int64_t k_bits;  // taps * input channels
};

template <int G, int P>
__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) void conv_block(const Layer& layer,
                                                                            const Block& block,
                                                                            int64_t group) {
  const TapWeights& w = *layer.weights;
  const int64_t dwords = w.dwords, step = w.vectors * kLanes;
  __m512i mismatches[P][G];
  for (auto& pixel : mismatches)
    for (__m512i& m : pixel) m = _mm512_setzero_si512();
  const uint32_t* weights = w.bits.data() + group * kMaxVectors * kLanes;
  for (int64_t t = 0; t < w.taps; ++t) {
    const int64_t offset = layer.tap_offset[t];
    for (int64_t d = 0; d < dwords; ++d, weights += step) {
      __m512i a[P];
      for (int p = 0; p < P; ++p)
        a[p] = _mm512_set1_epi32(static_cast<int>(block.origin[p][offset + d]));
      for (int v = 0; v < G; ++v) {
        const __m512i plus = _mm512_loadu_si512(weights + v * kLanes);
        for (int p = 0; p < P; ++p)
          mismatches[p][v] =
              _mm512_add_epi32(mismatches[p][v], _mm512_popcnt_epi32(_mm512_xor_si512(a[p], plus)));
      }
    }
  }
  // dot = K - 2 * mismatches + border, then the float steps of the other paths; the explicitly
  // rounded forms, which the compiler does not contract into one FMA (a different rounding).
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const ConvEpilogue& e = *layer.epilogue;
  const __m512i k = _mm512_set1_epi32(static_cast<int>(layer.k_bits));
  const __m512 lo = _mm512_set1_ps(e.lo), hi = _mm512_set1_ps(e.hi);
  for (int v = 0; v < G; ++v) {
    const int64_t o = (group * kMaxVectors + v) * kLanes;
    const __mmask16 lanes = lanes16(o, w.n);
    const __m512 scale = load16(e.scale + o, lanes);
    const __m512 bias = load16(e.bias + o, lanes);
    for (int p = 0; p < P; ++p) {
      const __m512i dot = _mm512_add_epi32(
          _mm512_sub_epi32(k, _mm512_add_epi32(mismatches[p][v], mismatches[p][v])),
          _mm512_maskz_loadu_epi32(lanes, block.border[p] + o));
      const __m512 y = _mm512_add_round_ps(
          _mm512_mul_round_ps(_mm512_cvtepi32_ps(dot), scale, kNearest), bias, kNearest);
      store16(block.out[p] + o, lanes, _mm512_min_ps(_mm512_max_ps(y, lo), hi));
    }
  }
}

using BlockFn = void (*)(const Layer&, const Block&, int64_t);

template <int G, size_t... P>
constexpr std::array<BlockFn, kPixels> pixel_counts(std::index_sequence<P...>) {
  return {&conv_block<G, static_cast<int>(P) + 1>...};
}

// [vectors in the group - 1][pixels in the block - 1]
constexpr std::array<std::array<BlockFn, kPixels>, kMaxVectors> kBlocks = {
    pixel_counts<1>(std::make_index_sequence<kPixels>()),
    pixel_counts<2>(std::make_index_sequence<kPixels>()),
    pixel_counts<3>(std::make_index_sequence<kPixels>()),
    pixel_counts<4>(std::make_index_sequence<kPixels>())};

}  // namespace

__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) bool pack_sign_dwords_avx512(
    const float* x, int64_t rows, int64_t k, int64_t dwords, uint32_t* out) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  bool signs = true;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < dwords; ++d) {
      const float* v = x + r * k + d * 32;
      const int64_t len = std::min<int64_t>(32, k - d * 32);
      uint32_t word = 0;
      for (int64_t j = 0; j < len; j += kLanes) {
        const __mmask16 lanes = lanes16(j, len);
        const __m512 a = load16(v + j, lanes);
        const __m512 size =
            _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), magnitude));
        signs &= _mm512_mask_cmp_ps_mask(lanes, size, one, _CMP_EQ_OQ) == lanes;
        word |= static_cast<uint32_t>(_mm512_mask_cmp_ps_mask(lanes, a, zero, _CMP_GT_OQ)) << j;
      }
      out[r * dwords + d] = word;
    }
  return signs;
}

bool pack_image_avx512(const float* x, int64_t h, int64_t w, int64_t in, const PackedImage& image,
                       uint32_t* bits) {
  bool signs = true;
  for (int64_t b = 0; b < image.batch; ++b)
    for (int64_t iy = 0; iy < h; ++iy)
      signs &= pack_sign_dwords_avx512(
          x + (b * h + iy) * w * in, w, in, image.dwords,
          bits + ((b * image.height + image.pad_top + iy) * image.width + image.pad_left) *
                     image.dwords);
  return signs;
}

// The OR over the window of each value's sign: a window's maximum is > 0 exactly when one of
// its values is.
__attribute__((target("avx512f,avx512vl,avx512vpopcntdq"))) void max_pool_sign_bits_avx512(
    const float* x, int64_t batch, int64_t h, int64_t w, int64_t channels, const Window2D& g,
    uint32_t* out) {
  const int64_t dwords = dwords_for(channels);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t oy = 0; oy < g.h.out; ++oy)
      for (int64_t ox = 0; ox < g.w.out; ++ox)
        for (int64_t d = 0; d < dwords; ++d) {
          const int64_t len = std::min<int64_t>(32, channels - d * 32);
          uint32_t word = 0;
          for (int64_t i = 0; i < g.h.k; ++i) {
            const int64_t iy = oy * g.h.stride - g.h.pad_before + i;
            if (iy < 0 || iy >= h) continue;
            for (int64_t j = 0; j < g.w.k; ++j) {
              const int64_t ix = ox * g.w.stride - g.w.pad_before + j;
              if (ix < 0 || ix >= w) continue;
              const float* v = x + ((b * h + iy) * w + ix) * channels + d * 32;
              for (int64_t c = 0; c < len; c += kLanes) {
                const __mmask16 lanes = lanes16(c, len);
                word |= static_cast<uint32_t>(_mm512_mask_cmp_ps_mask(
                            lanes, load16(v + c, lanes), zero, _CMP_GT_OQ))
                        << c;
              }
            }
          }
          out[((b * g.h.out + oy) * g.w.out + ox) * dwords + d] = word;
        }
}

void xnor_conv_avx512(const PackedImage& image, const DirectConvWindow& window,
                      const TapWeights& weights, const ConvEpilogue& epilogue, float* y,
                      bool split) {
  std::vector<int64_t> tap_offset(static_cast<size_t>(window.kh * window.kw));
  for (int64_t i = 0; i < window.kh; ++i)
    for (int64_t j = 0; j < window.kw; ++j)
      tap_offset[static_cast<size_t>(i * window.kw + j)] =
          (i * window.dilation_h * image.width + j * window.dilation_w) * image.dwords;
  const Layer layer{tap_offset.data(), &weights, &epilogue, weights.taps * weights.in};
  const int64_t pixels = window.out_h * window.out_w, n = weights.n;
  const int64_t groups = (weights.vectors + kMaxVectors - 1) / kMaxVectors;
  const int64_t blocks = (pixels + kPixels - 1) / kPixels;  // per image
  parallel_for(0, image.batch * blocks, split,
               [&](int64_t share_begin, int64_t share_end) {
                 for (int64_t flat = share_begin; flat < share_end; ++flat) {
                   const int64_t b = flat / blocks, q0 = flat % blocks * kPixels;
                   const int count = static_cast<int>(std::min<int64_t>(kPixels, pixels - q0));
                   Block block;
                   for (int p = 0; p < count; ++p) {
                     const int64_t q = q0 + p, oy = q / window.out_w, ox = q % window.out_w;
                     block.origin[p] =
                         image.bits + ((b * image.height + oy * window.stride_h) * image.width +
                                       ox * window.stride_w) *
                                          image.dwords;
                     block.border[p] = epilogue.border + q * n;
                     block.out[p] = y + (b * pixels + q) * n;
                   }
                   for (int64_t g = 0; g < groups; ++g) {
                     const int64_t vectors =
                         std::min<int64_t>(kMaxVectors, weights.vectors - g * kMaxVectors);
                     kBlocks[static_cast<size_t>(vectors - 1)][static_cast<size_t>(count - 1)](
                         layer, block, g);
                   }
                 }
               });
}

#pragma GCC diagnostic pop

}  // namespace sf::binary
